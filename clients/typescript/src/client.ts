// `Client` and `Queue`: every call of the HTTP API as a method, on `fetch`.
// Expected outcomes come back as values; only failures throw `DueqError`. Idempotent calls are
// sent again after transient failures (`retries`); the README has the table.

import { DueqError, InvalidInputError, errorCode, errorFor } from "./errors.js";
import { withTraceContext } from "./tracing.js";
import type {
  AckOutcome,
  Backfilled,
  BackfillRange,
  BrowseOptions,
  BrowsedTask,
  CancelOutcome,
  ClaimOptions,
  ClaimedTask,
  ClockReading,
  DeadBulkResult,
  DeadFilter,
  DeadOutcome,
  DeadPage,
  DeleteQueueOutcome,
  Enqueued,
  EnqueueOptions,
  Health,
  Lease,
  NackOptions,
  NackResult,
  PurgeResult,
  PurgeState,
  QueueSettings,
  QueueStats,
  QueuesPage,
  Readiness,
  ReleaseOutcome,
  Rescheduled,
  Schedule,
  SchedulesPage,
  ScheduleSpec,
  SettingsChanges,
  Task,
  TaskPage,
  TaskRef,
  TaskSpec,
  Triggered,
  Webhook,
  WebhookSpec,
  WorkerBeat,
  WorkerInfo,
} from "./types.js";

/** Most items in one batch request (enqueue, acks, nacks, releases) and one claim. */
export const MAX_BATCH = 1000;

export interface ClientOptions {
  /** The server's bearer token (`DUEQ_TOKENS`), when it has tokens. */
  token?: string;
  /** Time limit of one request, ms (a long-poll claim adds its `wait_ms`). Default 30000. */
  timeoutMs?: number;
  /** The `fetch` to use (default: the global one). */
  fetch?: typeof fetch;
  /**
   * How many times an idempotent call (see the README's retry table) is sent again after
   * `connection_failed`, `timeout`, 408 or 503, 0 to 10; 0 disables retries. Default 2.
   * Calls that a repeat could apply twice (a keyless enqueue, claim, ack, nack...) are never
   * sent again.
   */
  retries?: number;
  /** Delay before the first retry, ms; it doubles for each further one, up to `retryMaxMs`,
   * and each delay is drawn at random between half and all of that (jitter). Default 100. */
  retryBaseMs?: number;
  /** Longest delay between two tries, ms. Default 2000. */
  retryMaxMs?: number;
}

/** Options of one raw request (`Client.request`, `Client.call`). */
export interface RequestOptions {
  /** Time limit of each try, ms (default: the client's `timeoutMs`). */
  timeoutMs?: number;
  /** Send it again after a transient failure (only safe when a repeat changes nothing). Default false. */
  idempotent?: boolean;
}

interface Answer {
  status: number;
  body: any;
}

/** A client-side refusal: nothing was sent. */
function invalid(field: string, message: string): InvalidInputError {
  return new InvalidInputError(0, "invalid_input", `${field}: ${message}`);
}

/**
 * One path segment, RFC 3986-encoded (keys may hold `/`, `%`, ...). Empty, `.` and `..` are
 * refused here: URL parsers drop dot segments (`%2e` too), so the request would reach
 * another route.
 */
function seg(field: string, s: unknown): string {
  if (typeof s !== "string" || s === "" || s === "." || s === "..") {
    throw invalid(field, `expected a non-empty string other than "." and "..", got ${JSON.stringify(s)}`);
  }
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
}

function integerIn(field: string, v: number, lo: number, hi: number): number {
  if (!Number.isInteger(v) || v < lo || v > hi) throw new RangeError(`${field} must be an integer ${lo} to ${hi}, got ${v}`);
  return v;
}

/**
 * The wait before retry number `attempt + 1`, ms: `baseMs` doubled `attempt` times, capped
 * at `maxMs`, then drawn between half and all of it (the jitter spreads clients that failed
 * together).
 */
export function retryDelayMs(attempt: number, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  const cap = Math.min(maxMs, baseMs * 2 ** Math.min(attempt, 30));
  return Math.round(cap / 2 + (random() * cap) / 2);
}

/** A failure worth sending an idempotent request again for: the server was not reached, did
 * not answer in time, or could not serve it now (408, 503). */
function transient(r: Answer | DueqError): boolean {
  if (r instanceof DueqError) return r.code === "connection_failed" || r.code === "timeout";
  return r.status === 408 || r.status === 503;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A dueq server at `url` (`http://127.0.0.1:7878`). */
export class Client {
  readonly url: string;
  readonly timeoutMs: number;
  /** Retries of an idempotent call (`ClientOptions.retries`). */
  readonly retries: number;
  readonly #retryBaseMs: number;
  readonly #retryMaxMs: number;
  #headers: Record<string, string>;
  #fetch: typeof fetch;

  constructor(url = "http://127.0.0.1:7878", options: ClientOptions = {}) {
    if (!/^https?:\/\//.test(url)) throw new TypeError(`dueq: expected an http:// or https:// URL, got ${url}`);
    this.url = url.replace(/\/+$/, "");
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.retries = integerIn("retries", options.retries ?? 2, 0, 10);
    this.#retryBaseMs = integerIn("retryBaseMs", options.retryBaseMs ?? 100, 0, 60_000);
    this.#retryMaxMs = integerIn("retryMaxMs", options.retryMaxMs ?? 2000, 0, 600_000);
    this.#headers = { accept: "application/json" };
    if (options.token) this.#headers.authorization = `Bearer ${options.token}`;
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  /** A handle on queue `name` (`[A-Za-z0-9_.-]{1,128}`, not `.` or `..`); no request is sent.
   * Throws `InvalidInputError` for an empty name, `.` or `..`; the server checks the rest. */
  queue(name: string): Queue {
    return new Queue(this, name);
  }

  /** Statistics of every queue that has had a task, sorted by name: every page of
   * `queuesPage` (one request per 1000 queues). */
  async queues(): Promise<QueueStats[]> {
    const out: QueueStats[] = [];
    let after: string | undefined;
    for (;;) {
      const page = await this.queuesPage(1000, after);
      out.push(...page.queues);
      if (page.next === null) return out;
      after = page.next;
    }
  }

  /** One page of queue statistics, sorted by name: at most `limit` (1 to 1000) queues after
   * the name `after` (a page's `next`; absent: from the start). */
  async queuesPage(limit = 100, after?: string): Promise<QueuesPage> {
    const q = new URLSearchParams({ limit: String(limit) });
    if (after !== undefined) q.set("after", after);
    return (await this.call("GET", "/v1/queues?" + q.toString(), undefined, { idempotent: true })) as QueuesPage;
  }

  /** Every live worker process and server (`GET /v1/workers`), in any language, sorted by
   * start time, then id; with `queue`, only those that serve that queue. */
  async workers(queue?: string): Promise<WorkerInfo[]> {
    const q = queue === undefined ? "" : "?" + new URLSearchParams({ queue }).toString();
    return (await this.call("GET", "/v1/workers" + q, undefined, { idempotent: true })).workers;
  }

  /**
   * Registers worker `id` in the live workers list, or refreshes its entry (`PUT
   * /v1/workers/{id}`; what `Worker` does every `heartbeatMs`). `id`: printable ASCII
   * without spaces, 1 to 200 bytes. Resolves to whether it is listed (`false`: the registry
   * holds 10 000 live entries). Rejects with `DueqError` `invalid_input` naming the bad field
   * (nothing written).
   */
  async beatWorker(id: string, beat: WorkerBeat): Promise<boolean> {
    return (await this.call("PUT", "/v1/workers/" + seg("id", id), beat, { idempotent: true })).registered === true;
  }

  /** Takes worker `id` off the live workers list at once (`DELETE /v1/workers/{id}`, a
   * graceful stop); whether it was listed. */
  async removeWorker(id: string): Promise<boolean> {
    return found(await this.request("DELETE", "/v1/workers/" + seg("id", id), undefined, { idempotent: false }));
  }

  /** The test clock of a server started with `dueq serve --test-clock`: read it and move it
   * forward in integration tests. No request is sent until a method of it is called. */
  get testClock(): TestClock {
    return new TestClock(this);
  }

  /** `GET /healthz`: `{ status: "ok" }` while the server process runs. */
  async health(): Promise<Health> {
    return this.call("GET", "/healthz", undefined, { idempotent: true });
  }

  /** `GET /readyz`: whether the server can serve now (Redis reachable, scripts loaded). Not
   * retried: a readiness probe wants the answer of the moment, `ready: false` included. */
  async ready(): Promise<Readiness> {
    const r = await this.request("GET", "/readyz");
    if ((r.status === 200 || r.status === 503) && typeof r.body?.ready === "boolean") return r.body as Readiness;
    throw DueqError.fromResponse(r.status, r.body);
  }

  /** `GET /metrics`: the Prometheus text. */
  async metrics(): Promise<string> {
    const body = await this.call("GET", "/metrics", undefined, { idempotent: true });
    return typeof body === "string" ? body : JSON.stringify(body);
  }

  /** `GET /openapi.json`: the OpenAPI document the server serves. */
  async openapi(): Promise<Record<string, unknown>> {
    return this.call("GET", "/openapi.json", undefined, { idempotent: true });
  }

  /**
   * Sends one request; the status and parsed body (JSON, else the text). Throws `timeout`
   * when no answer came in time (the request may have been applied), else
   * `connection_failed`. With `idempotent`, a transient failure (those two, 408, 503) is
   * tried again up to `retries` times, after `retryDelayMs`; the last answer or error counts.
   */
  async request(method: string, path: string, body?: unknown, options: RequestOptions = {}): Promise<Answer> {
    const tries = options.idempotent ? this.retries + 1 : 1;
    for (let attempt = 0; ; attempt++) {
      let r: Answer | DueqError;
      try {
        r = await this.#once(method, path, body, options.timeoutMs ?? this.timeoutMs);
      } catch (e) {
        if (!(e instanceof DueqError)) throw e;
        r = e;
      }
      if (attempt + 1 >= tries || !transient(r)) {
        if (r instanceof DueqError) throw r;
        return r;
      }
      await sleep(retryDelayMs(attempt, this.#retryBaseMs, this.#retryMaxMs));
    }
  }

  async #once(method: string, path: string, body: unknown, timeoutMs: number): Promise<Answer> {
    const headers: Record<string, string> = { ...this.#headers };
    let data: string | undefined;
    if (body !== undefined) {
      data = JSON.stringify(body);
      headers["content-type"] = "application/json";
    }
    let res: Response;
    let text: string;
    try {
      res = await this.#fetch(this.url + path, {
        method,
        headers,
        body: data,
        signal: AbortSignal.timeout(timeoutMs),
      });
      text = await res.text();
    } catch (e) {
      if ((e as Error).name === "TimeoutError") {
        throw errorFor(0, "timeout", `${method} ${path}: no answer within the timeout; it may have been applied`);
      }
      throw errorFor(0, "connection_failed", `${method} ${path}: ${(e as Error).message}`);
    }
    let parsed: unknown = null;
    if (text) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = text;
      }
    }
    return { status: res.status, body: parsed };
  }

  /** Sends one request (`request`); its parsed body when the status is in `ok` (default 200
   * and 201), else throws `DueqError`. */
  async call(method: string, path: string, body?: unknown, options: RequestOptions & { ok?: number[] } = {}): Promise<any> {
    const r = await this.request(method, path, body, options);
    if (!(options.ok ?? [200, 201]).includes(r.status)) throw DueqError.fromResponse(r.status, r.body);
    return r.body;
  }
}

function chunks<T>(items: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += MAX_BATCH) out.push(items.slice(i, i + MAX_BATCH));
  return out;
}

/** 200: `true`; 404 `not_found`: `false`; anything else throws. */
function found(r: Answer): boolean {
  if (r.status === 404 && errorCode(r.body) === "not_found") return false;
  if (r.status !== 200) throw DueqError.fromResponse(r.status, r.body);
  return true;
}

/** 200: the body; 404 `not_found`: `null`; anything else throws. */
function orNull<T>(r: Answer): T | null {
  return found(r) ? (r.body as T) : null;
}

/** `headers` as `{}` where an older server leaves them out. */
function withHeaders<T extends { headers?: Record<string, string> }>(t: T): T {
  return t.headers ? t : { ...t, headers: {} };
}

/** A keyed enqueue that keeps a live task: a repeat answers the task the first one wrote. */
const dedupedByKey = (t: EnqueueOptions): boolean => typeof t.key === "string" && (t.on_conflict ?? "keep") === "keep";

/**
 * The test clock of a server started with `dueq serve --test-clock`: every queue of it runs on
 * a virtual clock (Redis time plus an offset kept in Redis) that a test moves forward instead
 * of sleeping. Moves go forward only. On a server without the test clock every call rejects
 * with `NotFoundError`. Get one from `Client.testClock`.
 */
export class TestClock {
  readonly client: Client;

  constructor(client: Client) {
    this.client = client;
  }

  /** The clock now (`GET /v1/test/clock`). Retried. */
  async now(): Promise<ClockReading> {
    return this.client.call("GET", "/v1/test/clock", undefined, { idempotent: true });
  }

  /** Moves the clock forward by `ms` (1 ms to 100 years) and resolves to it as moved. Every
   * process of the server's Redis looks at once: tasks that became due go to waiting workers,
   * leases and expiries that passed end, schedules fire or skip the ticks crossed by their
   * misfire policy. Not retried (a
   * second try would move it twice). Rejects with `InvalidInputError` naming `advance_ms`. */
  async advance(ms: number): Promise<ClockReading> {
    return this.client.call("POST", "/v1/test/clock", { advance_ms: ms }, { idempotent: false });
  }

  /** Moves the clock forward to `at` (Unix epoch ms or a `Date`), as `advance` does. Not
   * retried (a second try would find the clock past `at`). Rejects with `InvalidInputError` naming `set_ms`
   * for a time before the clock's now. */
  async set(at: number | Date): Promise<ClockReading> {
    const ms = at instanceof Date ? at.getTime() : at;
    if (!Number.isFinite(ms)) throw invalid("set_ms", `${String(at)} is not a time`);
    return this.client.call("POST", "/v1/test/clock", { set_ms: ms }, { idempotent: false });
  }
}

/** Operations on one queue; get one from `Client.queue`. */
export class Queue {
  readonly client: Client;
  readonly name: string;
  readonly #base: string;

  constructor(client: Client, name: string) {
    this.client = client;
    this.name = name;
    this.#base = "/v1/queues/" + seg("queue", name);
  }

  /** The task's path, and whether it names the task by key (a key may pass to a newer task). */
  #target(ref: TaskRef): { path: string; byKey: boolean } {
    if (typeof ref === "string") return { path: `${this.#base}/tasks/${seg("id", ref)}`, byKey: false };
    if (ref && typeof ref === "object" && "id" in ref) return { path: `${this.#base}/tasks/${seg("id", ref.id)}`, byKey: false };
    if (ref && typeof ref === "object" && "key" in ref) return { path: `${this.#base}/keys/${seg("key", ref.key)}`, byKey: true };
    throw invalid("ref", `expected a task id, { id } or { key }, got ${JSON.stringify(ref)}`);
  }

  #schedule(name: string): string {
    return `${this.#base}/schedules/${seg("name", name)}`;
  }

  /**
   * Enqueues one task (`payload`: any JSON value). With a live `key`, answers the existing
   * task (`created: false`), or replaces it with `on_conflict: "replace"`. With
   * `unique_for_ms` the key stays taken that long after the task finished: an enqueue of it
   * meanwhile answers the finished task (`created: false`, `state` set). Throws
   * `DueqError` `invalid_input`, `in_progress` (replace of a running task), `unique_window`
   * (replace of a key in a finished task's window), `payload_too_large`, `redis_unavailable`. Retried on transient failures only with a
   * `key` and `on_conflict` `keep` (the default); a retry whose first try did land answers
   * `created: false`. `headers` travel with the task to its worker; with
   * `@opentelemetry/api` loaded, the caller's trace context is added to them unless they
   * hold a `traceparent`.
   */
  async enqueue(payload: unknown = null, options: EnqueueOptions = {}): Promise<Enqueued> {
    const body = await withTraceContext({ payload, ...options });
    return this.client.call("POST", `${this.#base}/tasks`, body, { idempotent: dedupedByKey(options) });
  }

  /**
   * Enqueues up to 1000 tasks in one atomic call; one result per task, in order: the
   * `Enqueued`, or a `DueqError` value (`in_progress`) for a task refused alone. A bad task
   * throws `invalid_input` and nothing is written. Retried only when every task has a `key`
   * and `on_conflict` `keep`. Each task carries the caller's trace context as with `enqueue`.
   */
  async enqueueBatch(tasks: readonly TaskSpec[]): Promise<Array<Enqueued | DueqError>> {
    const idempotent = tasks.length > 0 && tasks.every(dedupedByKey);
    const body = await Promise.all(tasks.map((t) => withTraceContext(t)));
    const r = await this.client.call("POST", `${this.#base}/tasks/batch`, { tasks: body }, { idempotent });
    return r.results.map((x: any) => ("error" in x ? DueqError.fromResponse(409, x) : (x as Enqueued)));
  }

  /** The task, or `null` when there is none. */
  async get(ref: TaskRef): Promise<Task | null> {
    const t = orNull<Task>(await this.client.request("GET", this.#target(ref).path, undefined, { idempotent: true }));
    return t && withHeaders(t);
  }

  /**
   * Cancels a scheduled task: `cancelled`, `in_progress` (a worker runs it; untouched) or
   * `not_found`. Never retried: a second try would answer `not_found` for the task the first
   * one cancelled.
   */
  async cancel(ref: TaskRef): Promise<CancelOutcome> {
    const { path } = this.#target(ref);
    const r = await this.client.request("DELETE", path, undefined, { idempotent: false });
    if ([200, 404, 409].includes(r.status) && typeof r.body?.outcome === "string") return r.body.outcome;
    throw DueqError.fromResponse(r.status, r.body);
  }

  /** Moves a scheduled task's due time. Retried by id, not by key: between two tries the key
   * may pass to a newer task. */
  async reschedule(ref: TaskRef, due: { delay_ms: number } | { due_at_ms: number }): Promise<Rescheduled> {
    const { path, byKey } = this.#target(ref);
    const r = await this.client.request("PATCH", path, due, { idempotent: !byKey });
    if (r.status === 200) return { outcome: "rescheduled", due_at_ms: r.body.due_at_ms };
    const code = errorCode(r.body);
    if (r.status === 409 && code === "in_progress") return { outcome: "in_progress" };
    if (r.status === 404 && code === "not_found") return { outcome: "not_found" };
    throw DueqError.fromResponse(r.status, r.body);
  }

  /**
   * One page of the live tasks: `scheduled` ones in due order (the default) or `active` ones
   * in lease-deadline order (`limit` 1 to 1000, default 50; `after`: the previous page's `next`).
   */
  async browse(options: BrowseOptions = {}): Promise<TaskPage> {
    const q = new URLSearchParams();
    if (options.state !== undefined) q.set("state", options.state);
    if (options.after !== undefined) q.set("after", options.after);
    if (options.limit !== undefined) q.set("limit", String(options.limit));
    const query = q.toString();
    const page: TaskPage = await this.client.call("GET", `${this.#base}/tasks${query ? "?" + query : ""}`, undefined, { idempotent: true });
    return { ...page, tasks: page.tasks.map(withHeaders) };
  }

  /** Every live task of a state, page after page of `browse` (`limit` tasks per request). */
  async *tasks(options: Omit<BrowseOptions, "after"> = {}): AsyncGenerator<BrowsedTask, void, undefined> {
    let after: string | undefined;
    for (;;) {
      const page = await this.browse({ ...options, ...(after === undefined ? {} : { after }) });
      yield* page.tasks;
      if (page.next === null) return;
      after = page.next;
    }
  }

  /** The queue's counts; `null` for a queue that never had a task. */
  async stats(): Promise<QueueStats | null> {
    return orNull<QueueStats>(await this.client.request("GET", this.#base, undefined, { idempotent: true }));
  }

  /** Stops handing out tasks; answers `true` (paused). */
  async pause(): Promise<boolean> {
    return (await this.client.call("POST", `${this.#base}/pause`, undefined, { idempotent: true })).paused;
  }

  /** Hands out tasks again; answers `false` (not paused). */
  async resume(): Promise<boolean> {
    return (await this.client.call("POST", `${this.#base}/resume`, undefined, { idempotent: true })).paused;
  }

  /**
   * Deletes the queue: its tasks in every state, settings, counters, schedules and webhook.
   * `not_empty` (nothing deleted) while tasks are scheduled or running, unless `force`.
   * Never retried: a repeat would also delete what was enqueued in between.
   */
  async delete(options: { force?: boolean } = {}): Promise<DeleteQueueOutcome> {
    const r = await this.client.request("DELETE", this.#base + (options.force ? "?force=true" : ""));
    const code = errorCode(r.body);
    if (r.status === 200) return "deleted";
    if (r.status === 404 && code === "not_found") return "not_found";
    if (r.status === 409 && code === "not_empty") return "not_empty";
    throw DueqError.fromResponse(r.status, r.body);
  }

  /**
   * Drops tasks of one state (`scheduled` ones count as cancelled): what it dropped and how
   * many are left (purge again while `left` > 0). A queue that never had a task throws
   * `NotFoundError`. Never retried.
   */
  async purge(state: PurgeState): Promise<PurgeResult> {
    const r = await this.client.request("POST", `${this.#base}/purge`, { state });
    if (r.status !== 200) throw DueqError.fromResponse(r.status, r.body);
    return r.body as PurgeResult;
  }

  /** One page of the dead-letter queue, newest first (`limit` 1 to 1000, default 20). */
  async deadList(offset = 0, limit = 20): Promise<DeadPage> {
    const page: DeadPage = await this.client.call("GET", `${this.#base}/dead?offset=${offset}&limit=${limit}`, undefined, { idempotent: true });
    return { ...page, tasks: page.tasks.map(withHeaders) };
  }

  /** Schedules a dead task again, due now: `retried`, `not_found` or `conflict` (its key is taken by another task: live, or in its unique window). */
  async deadRetry(id: string): Promise<DeadOutcome> {
    return deadOutcome(await this.client.request("POST", `${this.#base}/dead/${seg("id", id)}/retry`, undefined, { idempotent: false }));
  }

  /** Deletes a dead task for good: `deleted` or `not_found`. */
  async deadDelete(id: string): Promise<DeadOutcome> {
    return deadOutcome(await this.client.request("DELETE", `${this.#base}/dead/${seg("id", id)}`, undefined, { idempotent: false }));
  }

  /**
   * Retries every dead task `filter` matches (due now, or spread over `spread_ms`). One
   * request does bounded work: while the answer has a `cursor`, call again with the same
   * filter and that `cursor`. Retried only with `dry_run`.
   */
  async deadRetryMatching(filter: DeadFilter = {}): Promise<DeadBulkResult> {
    return this.client.call("POST", `${this.#base}/dead/retry`, filter, { idempotent: filter.dry_run === true });
  }

  /** Deletes every dead task `filter` matches, for good; paged by `cursor` like `deadRetryMatching`. */
  async deadDeleteMatching(filter: DeadFilter = {}): Promise<DeadBulkResult> {
    return this.client.call("POST", `${this.#base}/dead/delete`, filter, { idempotent: filter.dry_run === true });
  }

  /** Every schedule of the queue, sorted by name (one request per 1000). */
  async schedules(): Promise<Schedule[]> {
    const out: Schedule[] = [];
    let after: string | undefined;
    for (;;) {
      const page = await this.schedulesPage(1000, after);
      out.push(...page.schedules);
      if (page.next === null) return out;
      after = page.next;
    }
  }

  /** One page of schedules sorted by name: at most `limit` (1 to 1000) after the name `after`. */
  async schedulesPage(limit = 100, after?: string): Promise<SchedulesPage> {
    const q = new URLSearchParams({ limit: String(limit) });
    if (after !== undefined) q.set("after", after);
    return this.client.call("GET", `${this.#base}/schedules?${q.toString()}`, undefined, { idempotent: true });
  }

  /** Schedule `name`, or `null` when there is none. */
  async schedule(name: string): Promise<Schedule | null> {
    return orNull<Schedule>(await this.client.request("GET", this.#schedule(name), undefined, { idempotent: true }));
  }

  /**
   * Creates or replaces schedule `name` (`[A-Za-z0-9_.-]{1,128}`); its `outcome` says
   * `created`, `replaced` or `unchanged` (the same definition again). A replace that keeps
   * `cron` / `every_ms` / `tz` keeps the next fire time.
   */
  async setSchedule(name: string, spec: ScheduleSpec): Promise<Schedule> {
    return this.client.call("PUT", this.#schedule(name), spec, { idempotent: true });
  }

  /** Deletes schedule `name` (tasks it already enqueued stay); whether it existed. */
  async deleteSchedule(name: string): Promise<boolean> {
    return found(await this.client.request("DELETE", this.#schedule(name), undefined, { idempotent: false }));
  }

  /** Pauses schedule `name`: no tick fires or counts until it is resumed. Throws `NotFoundError` for an unknown schedule. */
  async pauseSchedule(name: string): Promise<Schedule> {
    return this.client.call("POST", `${this.#schedule(name)}/pause`, undefined, { idempotent: true });
  }

  /** Resumes schedule `name`. Throws `NotFoundError` for an unknown schedule. */
  async resumeSchedule(name: string): Promise<Schedule> {
    return this.client.call("POST", `${this.#schedule(name)}/resume`, undefined, { idempotent: true });
  }

  /** Runs schedule `name`'s task now, once, without moving its grid. Never retried (each
   * trigger is a new task). Throws `NotFoundError` for an unknown schedule. */
  async triggerSchedule(name: string): Promise<Triggered> {
    return this.client.call("POST", `${this.#schedule(name)}/trigger`);
  }

  /**
   * Enqueues one task per tick of a past range (at most 10 000 ticks), each due now and keyed
   * as its tick. Never retried: a tick whose task already ran would be enqueued again. Throws
   * `NotFoundError` for an unknown schedule.
   */
  async backfillSchedule(name: string, range: BackfillRange): Promise<Backfilled> {
    return this.client.call("POST", `${this.#schedule(name)}/backfill`, range, { idempotent: false });
  }

  /** The queue's settings (`null` fields: the default). */
  async settings(): Promise<QueueSettings> {
    return this.client.call("GET", `${this.#base}/settings`, undefined, { idempotent: true });
  }

  /** Changes only the settings given (`null`: back to the default); the settings after the
   * change. A bad value or unknown field: `InvalidInputError` naming it, nothing written. */
  async updateSettings(changes: SettingsChanges): Promise<QueueSettings> {
    return this.client.call("PATCH", `${this.#base}/settings`, changes, { idempotent: true });
  }

  /** The queue's push delivery target (without its secret), or `null` when it has none. */
  async webhook(): Promise<Webhook | null> {
    return orNull<Webhook>(await this.client.request("GET", `${this.#base}/webhook`, undefined, { idempotent: true }));
  }

  /** Sets or replaces the queue's webhook; the answer carries the signing `secret` (keep it). */
  async setWebhook(spec: WebhookSpec): Promise<Webhook> {
    return this.client.call("PUT", `${this.#base}/webhook`, spec, { idempotent: true });
  }

  /** Removes the queue's webhook; whether it had one. */
  async deleteWebhook(): Promise<boolean> {
    return found(await this.client.request("DELETE", `${this.#base}/webhook`, undefined, { idempotent: false }));
  }

  /**
   * Claims up to `max` (1 to 1000) due tasks, waiting up to `wait_ms` (0 to 60000) for the
   * first one, each under a lease of `lease_ms` (default: the task's own). `worker_id` (the
   * worker sends its `id`) is kept with each lease: while the task runs, `get` shows it.
   * Never retried: a lost answer would hold the tasks until their leases run out.
   */
  async claim(options: ClaimOptions = {}): Promise<ClaimedTask[]> {
    const body = {
      max: options.max ?? 1,
      wait_ms: options.wait_ms ?? 0,
      ...(options.lease_ms ? { lease_ms: options.lease_ms } : {}),
      ...(options.worker_id !== undefined ? { worker_id: options.worker_id } : {}),
    };
    const r = await this.client.call("POST", `${this.#base}/claim`, body, { ok: [200], timeoutMs: this.client.timeoutMs + body.wait_ms });
    return r.tasks.map((t: ClaimedTask) => ({ ...withHeaders(t), continues_trace: t.continues_trace ?? false }));
  }

  /** Completes a claimed task: `acked` or `lease_lost` (nothing changed). */
  async ack(task: Lease): Promise<AckOutcome> {
    const r = await this.client.request("POST", `${this.#base}/tasks/${seg("id", task.id)}/ack`, { lease_token: task.lease_token });
    if (r.status === 200) return r.body.outcome;
    if (r.status === 409 && errorCode(r.body) === "lease_lost") return "lease_lost";
    throw DueqError.fromResponse(r.status, r.body);
  }

  /** Completes many claimed tasks, one request per 1000; one outcome per task, in order. */
  async ackBatch(tasks: readonly Lease[]): Promise<AckOutcome[]> {
    const out: AckOutcome[] = [];
    for (const c of chunks(tasks)) {
      const acks = c.map((t) => ({ id: t.id, lease_token: t.lease_token }));
      const r = await this.client.call("POST", `${this.#base}/acks`, { acks });
      for (const x of r.results) out.push(x.outcome);
    }
    return out;
  }

  /** Fails the current attempt: retried (`retry_in_ms` or the queue's backoff) or dead-lettered. */
  async nack(task: Lease, options: NackOptions = {}): Promise<NackResult> {
    const r = await this.client.request("POST", `${this.#base}/tasks/${seg("id", task.id)}/nack`, { lease_token: task.lease_token, ...options });
    if (r.status === 200) return r.body.due_at_ms == null ? { outcome: r.body.outcome } : { outcome: r.body.outcome, due_at_ms: r.body.due_at_ms };
    if (r.status === 409 && errorCode(r.body) === "lease_lost") return { outcome: "lease_lost" };
    throw DueqError.fromResponse(r.status, r.body);
  }

  /** Fails many attempts, one request per 1000; one result per item, in order. */
  async nackBatch(items: ReadonlyArray<{ task: Lease } & NackOptions>): Promise<NackResult[]> {
    const out: NackResult[] = [];
    for (const c of chunks(items)) {
      const nacks = c.map(({ task, ...o }) => ({ id: task.id, lease_token: task.lease_token, ...o }));
      const r = await this.client.call("POST", `${this.#base}/nacks`, { nacks });
      out.push(...r.results);
    }
    return out;
  }

  /** Hands leases back unfinished: due again at once, the attempt not counted. */
  async releaseBatch(tasks: readonly Lease[]): Promise<ReleaseOutcome[]> {
    const out: ReleaseOutcome[] = [];
    for (const c of chunks(tasks)) {
      const releases = c.map((t) => ({ id: t.id, lease_token: t.lease_token }));
      const r = await this.client.call("POST", `${this.#base}/releases`, { releases });
      for (const x of r.results) out.push(x.outcome);
    }
    return out;
  }

  /** Extends a lease to `lease_ms` from now: the new deadline (epoch ms), or `null` when the
   * lease was lost. Retried: a repeat only sets the same deadline again. */
  async extend(task: Lease, lease_ms: number): Promise<number | null> {
    const r = await this.client.request(
      "POST",
      `${this.#base}/tasks/${seg("id", task.id)}/extend`,
      { lease_token: task.lease_token, lease_ms },
      { idempotent: true },
    );
    if (r.status === 200) return r.body.lease_expires_at_ms;
    if (r.status === 409 && errorCode(r.body) === "lease_lost") return null;
    throw DueqError.fromResponse(r.status, r.body);
  }
}

function deadOutcome(r: Answer): DeadOutcome {
  if (r.status === 200) return r.body.outcome;
  const code = errorCode(r.body);
  if (r.status === 404 && code === "not_found") return "not_found";
  if (r.status === 409 && code === "conflict") return "conflict";
  throw DueqError.fromResponse(r.status, r.body);
}
