// Checking the `Dueq-Signature` header of a push delivery (webhook): `t=<Unix ms>,v1=<hex>`,
// HMAC-SHA256 keyed with the webhook's secret over the ASCII timestamp, a `.`, and the raw
// request body. Verify over the bytes received, before any JSON parsing, and answer 401
// when it fails (the delivery counts as a failed attempt and is retried).

import { createHmac, timingSafeEqual } from "node:crypto";

/** The header that carries the signature. */
export const SIGNATURE_HEADER = "Dueq-Signature";

export type Secret = string | Uint8Array;
/** A raw request body: the bytes (Buffer / Uint8Array) or their UTF-8 text. */
export type RawBody = string | Uint8Array;

/** Node (`req.headers`, Express, Fastify) or Fetch (`Headers`) request headers. */
export type RequestHeaders = Headers | Record<string, string | string[] | undefined>;

export interface VerifyOptions {
  /** Refuse timestamps further than this from `nowMs`, ms (replays). Default 300000. */
  toleranceMs?: number;
  /** "Now", Unix epoch ms. Default: this host's clock. */
  nowMs?: number;
}

function bytes(b: RawBody | Secret): Buffer {
  return typeof b === "string" ? Buffer.from(b, "utf8") : Buffer.from(b.buffer, b.byteOffset, b.byteLength);
}

/** The header value dueq sends for `body` at `timestampMs` (for tests). */
export function sign(secret: Secret, timestampMs: number, body: RawBody): string {
  const mac = createHmac("sha256", bytes(secret));
  mac.update(`${timestampMs}.`);
  mac.update(bytes(body));
  return `t=${timestampMs},v1=${mac.digest("hex")}`;
}

/**
 * Whether `header` (the `Dueq-Signature` value) signs `body` with `secret` (or any of
 * several secrets, while rotating) and its timestamp is within `toleranceMs` of now.
 * Compares in constant time.
 */
export function verifySignature(
  secret: Secret | readonly Secret[],
  header: string | null | undefined,
  body: RawBody,
  options: VerifyOptions = {},
): boolean {
  if (!header) return false;
  const fields = new Map<string, string>();
  for (const part of header.split(",")) {
    const i = part.indexOf("=");
    if (i > 0) fields.set(part.slice(0, i).trim(), part.slice(i + 1).trim());
  }
  const t = fields.get("t") ?? "";
  const v1 = (fields.get("v1") ?? "").toLowerCase();
  if (!/^\d+$/.test(t) || !/^[0-9a-f]{64}$/.test(v1)) return false;
  const now = options.nowMs ?? Date.now();
  if (Math.abs(now - Number(t)) > (options.toleranceMs ?? 300_000)) return false;
  const given = Buffer.from(v1, "hex");
  const secrets: readonly Secret[] = typeof secret === "string" || secret instanceof Uint8Array ? [secret] : (secret as readonly Secret[]);
  let ok = false;
  for (const s of secrets) {
    const mac = createHmac("sha256", bytes(s));
    mac.update(`${t}.`);
    mac.update(bytes(body));
    ok = timingSafeEqual(mac.digest(), given) || ok;
  }
  return ok;
}

/** The `Dueq-Signature` header of a Node or Fetch request's headers. */
export function signatureHeader(headers: RequestHeaders): string | undefined {
  if (typeof (headers as Headers).get === "function") return (headers as Headers).get(SIGNATURE_HEADER) ?? undefined;
  const h = headers as Record<string, string | string[] | undefined>;
  const v = h[SIGNATURE_HEADER.toLowerCase()] ?? h[SIGNATURE_HEADER];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Verifies a delivery from an Express / Fastify / Node request's headers and its raw body
 * (Express: `express.raw({ type: "*\/*" })`, then `req.body` is a Buffer; Fastify: a
 * content-type parser with `parseAs: "buffer"`).
 */
export function verifyWebhook(
  secret: Secret | readonly Secret[],
  headers: RequestHeaders,
  rawBody: RawBody,
  options: VerifyOptions = {},
): boolean {
  return verifySignature(secret, signatureHeader(headers), rawBody, options);
}
