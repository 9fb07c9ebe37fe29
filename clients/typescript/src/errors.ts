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
      return errorFor(status, String(e.code ?? "unknown"), String(e.message ?? ""));
    }
    return new DueqError(status, "unexpected_response", JSON.stringify(body)?.slice(0, 500) ?? "");
  }
}

/** Bad input, nothing written: `invalid_input`, `invalid_json`, `payload_too_large`, `unsupported_media_type`. */
export class InvalidInputError extends DueqError {}
/** No token, a wrong one, or a refused host or origin: `unauthorized`, `forbidden_host`, `forbidden_origin`. */
export class UnauthorizedError extends DueqError {}
/** `not_found`: no such route, queue, schedule or webhook. */
export class NotFoundError extends DueqError {}
/** The state refuses it: `conflict`, `in_progress`, `unique_window`, `not_empty`. */
export class ConflictError extends DueqError {}
/**
 * The server could not serve it now; retry later: `redis_unavailable`, `not_replicated`,
 * `request_timeout`, `internal`. A write may or may not have been applied.
 */
export class UnavailableError extends DueqError {}
/** `connection_failed`: the server was not reached, or the connection broke. */
export class ConnectionFailedError extends DueqError {}
/** `timeout`: the request was sent and no answer came in time; it may have been applied. */
export class TimeoutError extends DueqError {}

const BY_CODE: Record<string, new (status: number, code: string, message: string) => DueqError> = {
  invalid_input: InvalidInputError,
  invalid_json: InvalidInputError,
  payload_too_large: InvalidInputError,
  unsupported_media_type: InvalidInputError,
  unauthorized: UnauthorizedError,
  forbidden_host: UnauthorizedError,
  forbidden_origin: UnauthorizedError,
  not_found: NotFoundError,
  conflict: ConflictError,
  in_progress: ConflictError,
  unique_window: ConflictError,
  not_empty: ConflictError,
  redis_unavailable: UnavailableError,
  not_replicated: UnavailableError,
  request_timeout: UnavailableError,
  internal: UnavailableError,
  connection_failed: ConnectionFailedError,
  timeout: TimeoutError,
};

/** The `DueqError` subclass of `code` (a plain `DueqError` for a code this version does not know). */
export function errorFor(status: number, code: string, message: string): DueqError {
  const C = Object.prototype.hasOwnProperty.call(BY_CODE, code) ? BY_CODE[code] : DueqError;
  return new C(status, code, message);
}

/** The `code` of an error body, if it is one. */
export function errorCode(body: unknown): string | undefined {
  const c = (body as { error?: { code?: unknown } } | null)?.error?.code;
  return typeof c === "string" ? c : undefined;
}
