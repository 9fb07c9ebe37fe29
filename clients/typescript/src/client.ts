// `Client` and `Queue`: every call of the HTTP API (DESIGN 4.2) as a method, on `fetch`.
// Expected outcomes come back as values; only failures throw `DueqError`.

import { DueqError, errorCode, errorFor } from "./errors.js";
import type {
  AckOutcome,
  CancelOutcome,
  ClaimOptions,
  ClaimedTask,
  DeadOutcome,
  DeadPage,
  Enqueued,
  EnqueueOptions,
  Lease,
  NackOptions,
  NackResult,
  QueueStats,
  QueuesPage,
  ReleaseOutcome,
  Rescheduled,
  Task,
  TaskRef,
  TaskSpec,
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
}

interface Answer {
  status: number;
  body: any;
}

/** RFC 3986: everything outside the unreserved set encoded (keys may hold `/`, `%`, ...). */
function seg(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
}

/** A dueq server at `url` (`http://127.0.0.1:7878`). */
export class Client {
  readonly url: string;
  readonly timeoutMs: number;
  #headers: Record<string, string>;
  #fetch: typeof fetch;

  constructor(url = "http://127.0.0.1:7878", options: ClientOptions = {}) {
    if (!/^https?:\/\//.test(url)) throw new TypeError(`dueq: expected an http:// or https:// URL, got ${url}`);
    this.url = url.replace(/\/+$/, "");
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.#headers = { accept: "application/json" };
    if (options.token) this.#headers.authorization = `Bearer ${options.token}`;
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  /** A handle on queue `name` (`[A-Za-z0-9_.-]{1,128}`, not `.` or `..`); no request is sent. */
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
    return (await this.call("GET", "/v1/queues?" + q.toString())) as QueuesPage;
  }

  /** Every live worker process and server (`GET /v1/workers`), in any language, sorted by
   * start time, then id; with `queue`, only those that serve that queue. */
  async workers(queue?: string): Promise<WorkerInfo[]> {
    const q = queue === undefined ? "" : "?" + new URLSearchParams({ queue }).toString();
    return (await this.call("GET", "/v1/workers" + q)).workers;
  }

  /**
   * Registers worker `id` in the live workers list, or refreshes its entry (`PUT
   * /v1/workers/{id}`; what `Worker` does every `heartbeatMs`). `id`: printable ASCII
   * without spaces, 1 to 200 bytes. Resolves to whether it is listed (`false`: the registry
   * holds 10 000 live entries). Rejects with `DueqError` `invalid_input` naming the bad field
   * (nothing written).
   */
  async beatWorker(id: string, beat: WorkerBeat): Promise<boolean> {
    return (await this.call("PUT", "/v1/workers/" + seg(id), beat)).registered === true;
  }

  /** Takes worker `id` off the live workers list at once (`DELETE /v1/workers/{id}`, a
   * graceful stop); whether it was listed. */
  async removeWorker(id: string): Promise<boolean> {
    const r = await this.request("DELETE", "/v1/workers/" + seg(id));
    if (r.status === 404 && errorCode(r.body) === "not_found") return false;
    if (r.status !== 200) throw DueqError.fromResponse(r.status, r.body);
    return true;
  }

  /**
   * Sends one request; the status and parsed body. Throws `timeout` when no answer came in
   * time (the request may have been applied), else `connection_failed`.
   */
  async request(method: string, path: string, body?: unknown, timeoutMs?: number): Promise<Answer> {
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
        signal: AbortSignal.timeout(timeoutMs ?? this.timeoutMs),
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

  /** Sends one request; its parsed body when the status is in `ok`, else throws `DueqError`. */
  async call(method: string, path: string, body?: unknown, ok: number[] = [200, 201], timeoutMs?: number): Promise<any> {
    const r = await this.request(method, path, body, timeoutMs);
    if (!ok.includes(r.status)) throw DueqError.fromResponse(r.status, r.body);
    return r.body;
  }
}

function chunks<T>(items: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += MAX_BATCH) out.push(items.slice(i, i + MAX_BATCH));
  return out;
}

/** Operations on one queue; get one from `Client.queue`. */
export class Queue {
  readonly client: Client;
  readonly name: string;
  readonly #base: string;

  constructor(client: Client, name: string) {
    this.client = client;
    this.name = name;
    this.#base = "/v1/queues/" + seg(name);
  }

  #target(ref: TaskRef): string {
    if (typeof ref === "string") return `${this.#base}/tasks/${seg(ref)}`;
    if ("id" in ref) return `${this.#base}/tasks/${seg(ref.id)}`;
    return `${this.#base}/keys/${seg(ref.key)}`;
  }

  /**
   * Enqueues one task (`payload`: any JSON value). With a live `key`, answers the existing
   * task (`created: false`), or replaces it with `on_conflict: "replace"`. Throws
   * `DueqError` `invalid_input`, `in_progress` (replace of a running task),
   * `payload_too_large`, `redis_unavailable`.
   */
  async enqueue(payload: unknown = null, options: EnqueueOptions = {}): Promise<Enqueued> {
    return this.client.call("POST", `${this.#base}/tasks`, { payload, ...options });
  }

  /**
   * Enqueues up to 1000 tasks in one atomic call; one result per task, in order: the
   * `Enqueued`, or a `DueqError` value (`in_progress`) for a task refused alone. A bad task
   * throws `invalid_input` and nothing is written.
   */
  async enqueueBatch(tasks: readonly TaskSpec[]): Promise<Array<Enqueued | DueqError>> {
    const r = await this.client.call("POST", `${this.#base}/tasks/batch`, { tasks });
    return r.results.map((x: any) => ("error" in x ? DueqError.fromResponse(409, x) : (x as Enqueued)));
  }

  /** The task, or `null` when there is none. */
  async get(ref: TaskRef): Promise<Task | null> {
    const r = await this.client.request("GET", this.#target(ref));
    if (r.status === 404 && errorCode(r.body) === "not_found") return null;
    if (r.status !== 200) throw DueqError.fromResponse(r.status, r.body);
    return r.body as Task;
  }

  /** Cancels a scheduled task: `cancelled`, `in_progress` (a worker runs it; untouched) or `not_found`. */
  async cancel(ref: TaskRef): Promise<CancelOutcome> {
    const r = await this.client.request("DELETE", this.#target(ref));
    if ([200, 404, 409].includes(r.status) && typeof r.body?.outcome === "string") return r.body.outcome;
    throw DueqError.fromResponse(r.status, r.body);
  }

  /** Moves a scheduled task's due time. */
  async reschedule(ref: TaskRef, due: { delay_ms: number } | { due_at_ms: number }): Promise<Rescheduled> {
    const r = await this.client.request("PATCH", this.#target(ref), due);
    if (r.status === 200) return { outcome: "rescheduled", due_at_ms: r.body.due_at_ms };
    const code = errorCode(r.body);
    if (r.status === 409 && code === "in_progress") return { outcome: "in_progress" };
    if (r.status === 404 && code === "not_found") return { outcome: "not_found" };
    throw DueqError.fromResponse(r.status, r.body);
  }

  /** The queue's counts; `null` for a queue that never had a task. */
  async stats(): Promise<QueueStats | null> {
    const r = await this.client.request("GET", this.#base);
    if (r.status === 404 && errorCode(r.body) === "not_found") return null;
    if (r.status !== 200) throw DueqError.fromResponse(r.status, r.body);
    return r.body as QueueStats;
  }

  /** Stops handing out tasks; answers `true` (paused). */
  async pause(): Promise<boolean> {
    return (await this.client.call("POST", `${this.#base}/pause`)).paused;
  }

  /** Hands out tasks again; answers `false` (not paused). */
  async resume(): Promise<boolean> {
    return (await this.client.call("POST", `${this.#base}/resume`)).paused;
  }

  /** One page of the dead-letter queue, newest first (`limit` 1 to 1000, default 20). */
  async deadList(offset = 0, limit = 20): Promise<DeadPage> {
    return this.client.call("GET", `${this.#base}/dead?offset=${offset}&limit=${limit}`);
  }

  /** Schedules a dead task again, due now: `retried`, `not_found` or `conflict` (its key is live on another task). */
  async deadRetry(id: string): Promise<DeadOutcome> {
    return deadOutcome(await this.client.request("POST", `${this.#base}/dead/${seg(id)}/retry`));
  }

  /** Deletes a dead task for good: `deleted` or `not_found`. */
  async deadDelete(id: string): Promise<DeadOutcome> {
    return deadOutcome(await this.client.request("DELETE", `${this.#base}/dead/${seg(id)}`));
  }

  /**
   * Claims up to `max` (1 to 1000) due tasks, waiting up to `wait_ms` (0 to 60000) for the
   * first one, each under a lease of `lease_ms` (default: the task's own). `worker_id` (the
   * worker sends its `id`) is kept with each lease: while the task runs, `get` shows it.
   */
  async claim(options: ClaimOptions = {}): Promise<ClaimedTask[]> {
    const body = {
      max: options.max ?? 1,
      wait_ms: options.wait_ms ?? 0,
      ...(options.lease_ms ? { lease_ms: options.lease_ms } : {}),
      ...(options.worker_id !== undefined ? { worker_id: options.worker_id } : {}),
    };
    const r = await this.client.call("POST", `${this.#base}/claim`, body, [200], this.client.timeoutMs + body.wait_ms);
    return r.tasks;
  }

  /** Completes a claimed task: `acked` or `lease_lost` (nothing changed). */
  async ack(task: Lease): Promise<AckOutcome> {
    return (await this.ackBatch([task]))[0]!;
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
    return (await this.nackBatch([{ task, ...options }]))[0]!;
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

  /** Extends a lease to `lease_ms` from now: the new deadline (epoch ms), or `null` when the lease was lost. */
  async extend(task: Lease, lease_ms: number): Promise<number | null> {
    const r = await this.client.request("POST", `${this.#base}/tasks/${seg(task.id)}/extend`, {
      lease_token: task.lease_token,
      lease_ms,
    });
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
