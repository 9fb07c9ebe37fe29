// Checking a push delivery (webhook) by the Standard Webhooks specification. dueq signs each
// delivery with the queue's `whsec_` secret: `webhook-signature` holds `v1,` and the base64 of
// HMAC-SHA256 over `{webhook-id}.{webhook-timestamp}.{body}`, one entry per secret while a
// secret change lasts. Verify over the raw bytes received, before any JSON parsing, and answer
// 401 when it fails (the delivery counts as a failed attempt and is retried). Any Standard
// Webhooks library gives the same answer.

import { createHmac, timingSafeEqual } from "node:crypto";

/** The message id, `{queue}:{task id}`: the same on every attempt of a task. */
export const WEBHOOK_ID_HEADER = "webhook-id";
/** When the attempt started, Unix seconds. */
export const WEBHOOK_TIMESTAMP_HEADER = "webhook-timestamp";
/** Space-separated `v1,<base64>` signatures. */
export const WEBHOOK_SIGNATURE_HEADER = "webhook-signature";

/** A `whsec_` secret as dueq gives it, or the raw key bytes. */
export type Secret = string | Uint8Array;
/** A raw request body: the bytes (Buffer / Uint8Array) or their UTF-8 text. */
export type RawBody = string | Uint8Array;

/** Node (`req.headers`, Express, Fastify) or Fetch (`Headers`) request headers. */
export type RequestHeaders = Headers | Record<string, string | string[] | undefined>;

export interface VerifyOptions {
  /** Refuse timestamps further than this from `nowS`, seconds (replays). Default 300. */
  toleranceS?: number;
  /** "Now", Unix seconds. Default: this host's clock. */
  nowS?: number;
}

function bytes(b: Uint8Array | string): Buffer {
  return typeof b === "string" ? Buffer.from(b, "utf8") : Buffer.from(b.buffer, b.byteOffset, b.byteLength);
}

function key(secret: Secret): Buffer {
  if (typeof secret !== "string") return bytes(secret);
  return Buffer.from(secret.startsWith("whsec_") ? secret.slice(6) : secret, "base64");
}

/** The `webhook-signature` entry dueq sends for `body` (for tests). */
export function signWebhook(secret: Secret, msgId: string, timestampS: number, body: RawBody): string {
  const mac = createHmac("sha256", key(secret));
  mac.update(`${msgId}.${timestampS}.`);
  mac.update(bytes(body));
  return `v1,${mac.digest("base64")}`;
}

/** A header of a Node or Fetch request, by name in any case. */
function header(headers: RequestHeaders, name: string): string | undefined {
  if (typeof (headers as Headers).get === "function") return (headers as Headers).get(name) ?? undefined;
  const h = headers as Record<string, string | string[] | undefined>;
  let v = h[name];
  if (v === undefined) {
    for (const [k, value] of Object.entries(h)) if (k.toLowerCase() === name) v = value;
  }
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Whether `headers` carry a signature of `rawBody` under `secret` (or under any of several
 * secrets, while you rotate) and a timestamp within `toleranceS` of now. Works with an
 * Express / Fastify / Node request's headers and its raw body (Express:
 * `express.raw({ type: "*\/*" })`, then `req.body` is a Buffer; Fastify: a content-type parser
 * with `parseAs: "buffer"`) or a Fetch `Request`'s headers. Compares in constant time.
 */
export function verifyWebhook(
  secret: Secret | readonly Secret[],
  headers: RequestHeaders,
  rawBody: RawBody,
  options: VerifyOptions = {},
): boolean {
  const msgId = header(headers, WEBHOOK_ID_HEADER);
  const ts = header(headers, WEBHOOK_TIMESTAMP_HEADER) ?? "";
  const given = (header(headers, WEBHOOK_SIGNATURE_HEADER) ?? "").split(" ").filter((s) => s);
  if (!msgId || !/^\d+$/.test(ts) || given.length === 0) return false;
  const now = options.nowS ?? Math.floor(Date.now() / 1000);
  if (Math.abs(now - Number(ts)) > (options.toleranceS ?? 300)) return false;
  const secrets: readonly Secret[] = typeof secret === "string" || secret instanceof Uint8Array ? [secret] : (secret as readonly Secret[]);
  let ok = false;
  for (const s of secrets) {
    const expected = Buffer.from(signWebhook(s, msgId, Number(ts), rawBody));
    for (const g of given) {
      const b = Buffer.from(g);
      ok = (b.length === expected.length && timingSafeEqual(b, expected)) || ok;
    }
  }
  return ok;
}
