// dueq: the client and worker for a dueq server's HTTP API (`dueq serve`). See README.md.

export { Client, Queue, TestClock, MAX_BATCH } from "./client.js";
export type { ClientOptions, RequestOptions } from "./client.js";
export {
  ConflictError,
  ConnectionFailedError,
  DueqError,
  InvalidInputError,
  NotFoundError,
  TimeoutError,
  UnauthorizedError,
  UnavailableError,
  errorFor,
} from "./errors.js";
export { TaskAbortedError, Worker, retry, fail } from "./worker.js";
export type { AbortKind, Fail, Handler, HandlerContext, Retry, WorkerOptions, WorkerStats } from "./worker.js";
export { WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER, signWebhook, verifyWebhook } from "./webhook.js";
export type { RawBody, RequestHeaders, Secret, VerifyOptions } from "./webhook.js";
export type * from "./types.js";
export { VERSION } from "./version.js";
