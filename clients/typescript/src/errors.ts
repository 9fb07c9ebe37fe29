/**
 * The one error type of the client: a request the server refused or could not serve.
 *
 * `code` is the API's stable error code (`invalid_input`, `invalid_json`, `unauthorized`,
 * `payload_too_large`, `unsupported_media_type`, `redis_unavailable`, `not_replicated`,
 * `request_timeout`, `internal`, ...); `connection_failed` when the server could not be
 * reached or the connection broke; `timeout` when the request was sent and no answer came in
 * time, so it may have been applied (`status` 0 for both). Expected outcomes (a task not found, a cancel that finds the task
 * running, a stale lease token) are return values, never this error.
 */
export class DueqError extends Error {
  readonly status: number;
  readonly code: string;

  constructor(status: number, code: string, message: string) {
    super(status ? `${code} (${status}): ${message}` : `${code}: ${message}`);
    this.name = "DueqError";
    this.status = status;
    this.code = code;
  }

  /** Builds the error from an answer's `{"error": {"code", "message"}}` body. */
  static fromResponse(status: number, body: unknown): DueqError {
    const e = (body as { error?: { code?: unknown; message?: unknown } } | null)?.error;
    if (e && typeof e === "object") {
      return new DueqError(status, String(e.code ?? "unknown"), String(e.message ?? ""));
    }
    return new DueqError(status, "unexpected_response", JSON.stringify(body)?.slice(0, 500) ?? "");
  }
}

/** The `code` of an error body, if it is one. */
export function errorCode(body: unknown): string | undefined {
  const c = (body as { error?: { code?: unknown } } | null)?.error?.code;
  return typeof c === "string" ? c : undefined;
}
