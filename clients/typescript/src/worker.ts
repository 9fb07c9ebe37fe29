// `Worker`: runs an async handler for every task of a queue, at most `concurrency` at once.
//
// Duties: the claim loop long-polls for as many tasks as there are free slots (at most
// `claimMax`; while tasks are in hand it waits for half a batch of free slots), naming the
// worker (`worker_id`: its `id`); each handler gets an `AbortSignal` beside its task and, with
// `@opentelemetry/api` loaded, runs in a consumer span (`tracing.ts`); each
// answer is queued and the acker sends everything queued since its last request in one
// `/acks` and one `/nacks` request; the lease keeper extends the lease of a handler that has
// run for a third of `leaseMs`, and aborts the handler's signal when its lease is lost (an
// extend answers `lease_lost`, or no extend landed before the lease ran out by this host's
// clock, counted from the claim's answer or the last extend that landed); the heartbeat
// registers the worker in the server's live workers list (`GET /v1/workers`, `dueq workers`,
// the dashboard) when `run()` starts and beats every `heartbeatMs` (default 5000) with its
// queue, concurrency, the handlers running at that moment, host, pid, this client's version
// and `typescript`; the entry expires 3 beats after the last one. A failed beat goes to
// `onError` and the next one comes at the next interval: it never stops the worker.
//
// Shutdown order (`stop()`, or SIGTERM / SIGINT while `run()` runs with `handleSignals`):
// 1. the long-poll in flight finishes (at most `pollMs`) and nothing more is claimed;
// 2. running handlers get `graceMs` to finish; their answers are sent;
// 3. the signals of handlers still running then abort (reason `shutdown`) and their leases
//    are handed back (`/releases`: due again at once, the attempt not counted); what those
//    handlers report later is dropped;
// 4. the acker sends what is left;
// 5. the heartbeat stops (a beat in flight finishes) and the worker leaves the live workers
//    list (`DELETE /v1/workers/{id}`, its last call); `run()` resolves with the counts.

import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import type { Client, Queue } from "./client.js";
import { DueqError } from "./errors.js";
import { startRun } from "./tracing.js";
import type { ClaimedTask, NackOptions } from "./types.js";
import { VERSION } from "./version.js";

/** Fail this attempt and run the task again in `inMs` (default: the queue's backoff). */
export interface Retry {
  readonly kind: "retry";
  readonly inMs?: number;
  readonly error: string;
}

/** Fail for good: straight to the dead-letter queue. */
export interface Fail {
  readonly kind: "fail";
  readonly error: string;
}

export function retry(inMs?: number, error = "retry requested"): Retry {
  return { kind: "retry", inMs, error };
}

export function fail(error = "failed permanently"): Fail {
  return { kind: "fail", error };
}

/** Why a handler's signal aborted: the worker is stopping, or the task's lease is lost. */
export type AbortKind = "shutdown" | "lease_lost";

/**
 * The `reason` of a handler's aborted signal (`signal.reason`). Its `name` is `AbortError`,
 * as for any aborted `fetch`; `kind` says why.
 */
export class TaskAbortedError extends Error {
  override readonly name = "AbortError";
  readonly kind: AbortKind;
  readonly taskId: string;

  constructor(kind: AbortKind, taskId: string, message: string) {
    super(message);
    this.kind = kind;
    this.taskId = taskId;
  }
}

/** What a handler gets beside its task. */
export interface HandlerContext {
  /**
   * Aborts when the handler should stop: the worker is stopping and `graceMs` has passed
   * (`reason.kind` `shutdown`), or the task's lease is lost (`lease_lost`). Pass it to
   * `fetch` and other abortable calls. A handler that throws once its signal aborted does
   * not fail the attempt: the task is handed back instead.
   */
  readonly signal: AbortSignal;
}

/**
 * A handler resolves to nothing (or anything but `retry()` / `fail()`) for success: the task
 * is acknowledged. It throws to fail the attempt with the error's text as `last_error` (the
 * queue's backoff decides when it runs again; the dead-letter queue after `max_attempts`).
 * Its second argument carries an `AbortSignal` (`HandlerContext`).
 */
export type Handler = (task: ClaimedTask, context: HandlerContext) => Promise<unknown> | unknown;

export interface WorkerOptions {
  /** Handlers running at once. Default 16. */
  concurrency?: number;
  /** Most tasks per claim, 1 to 1000. Default 100. */
  claimMax?: number;
  /** How long one claim waits for work, ms (also the longest wait for `stop()`). Default 5000. */
  pollMs?: number;
  /** The lease asked for each claim, ms; extended for handlers running longer than a third of it. Default 30000. */
  leaseMs?: number;
  /** How long `stop()` lets running handlers finish, ms; then their signals abort and their
   * leases are handed back. Default 30000. */
  graceMs?: number;
  /** Stop on SIGTERM and SIGINT while `run()` runs. Default true. */
  handleSignals?: boolean;
  /** Time between two beats into the server's live workers list, ms, 100 to 60000; the
   * entry expires 3 beats after the last one. Default 5000. */
  heartbeatMs?: number;
  /** Called with failures of the worker itself (claims, acks, heartbeats); default `console.warn`. */
  onError?: (e: unknown) => void;
}

export interface WorkerStats {
  claimed: number;
  acked: number;
  retried: number;
  dead: number;
  released: number;
  /** Answers refused because the lease was no longer current. */
  lease_lost: number;
}

type Verdict = { kind: "ack" } | ({ kind: "nack" } & NackOptions) | { kind: "release" };

interface Running {
  task: ClaimedTask;
  /** When the claim was answered or the last extend was sent, by this host's clock. */
  extendedAt: number;
  /** When the lease runs out by this host's clock: the claim's answer or the send time of
   * the last extend that landed, plus `leaseMs`. */
  leaseDeadline: number;
  extending: boolean;
  abort: AbortController;
  done: Promise<void>;
}

const key = (t: ClaimedTask) => `${t.id}\u0000${t.lease_token}`;

/** Missed beats after which a worker's entry expires. */
const HEARTBEAT_MISSES = 3;

function hostName(): string {
  try {
    return hostname() || "unknown";
  } catch {
    return "unknown";
  }
}

/** `host:pid:` and 8 random hex digits (the host part: at most 100 printable ASCII characters
 * without spaces, so that the id fits a claim's `worker_id`, at most 200 bytes). */
function newWorkerId(): string {
  const host = hostName().replace(/[^!-~]/g, "-").slice(0, 100);
  return `${host}:${process.pid}:${randomBytes(4).toString("hex")}`;
}

export class Worker {
  readonly queue: Queue;
  /** This worker's id in the live workers list (`GET /v1/workers`): `host:pid:random`; also
   * the `worker_id` of its claims, so a task it runs shows it. */
  readonly id: string = newWorkerId();
  readonly stats: WorkerStats = { claimed: 0, acked: 0, retried: 0, dead: 0, released: 0, lease_lost: 0 };
  readonly #handler: Handler;
  readonly #o: Required<Omit<WorkerOptions, "onError">> & Pick<WorkerOptions, "onError">;
  #stopping = false;
  #wakeStop: () => void = () => {};
  #stopped: Promise<void>;
  #running = new Map<string, Running>();
  #abandoned = new Set<string>();
  #pending: Array<[ClaimedTask, Verdict]> = [];
  #slotFreed: (() => void) | null = null;
  #reported: (() => void) | null = null;
  #beatStopping = false;
  #wakeBeat: () => void = () => {};

  constructor(client: Client, queue: string | Queue, handler: Handler, options: WorkerOptions = {}) {
    this.queue = typeof queue === "string" ? client.queue(queue) : queue;
    this.#handler = handler;
    this.#o = {
      concurrency: options.concurrency ?? 16,
      claimMax: options.claimMax ?? 100,
      pollMs: options.pollMs ?? 5000,
      leaseMs: options.leaseMs ?? 30_000,
      graceMs: options.graceMs ?? 30_000,
      handleSignals: options.handleSignals ?? true,
      heartbeatMs: options.heartbeatMs ?? 5000,
      onError: options.onError,
    };
    if (this.#o.concurrency < 1) throw new RangeError("concurrency must be at least 1");
    if (this.#o.claimMax < 1 || this.#o.claimMax > 1000) throw new RangeError("claimMax must be 1 to 1000");
    if (this.#o.pollMs < 0 || this.#o.pollMs > 60_000) throw new RangeError("pollMs must be 0 to 60000");
    if (!(this.#o.heartbeatMs >= 100 && this.#o.heartbeatMs <= 60_000)) throw new RangeError("heartbeatMs must be 100 to 60000");
    this.#stopped = new Promise((resolve) => (this.#wakeStop = resolve));
  }

  /** Begins the shutdown; `run()` resolves once it is done. */
  stop(): void {
    this.#stopping = true;
    this.#wakeStop();
  }

  #warn(e: unknown): void {
    (this.#o.onError ?? ((x: unknown) => console.warn("dueq:", x)))(e);
  }

  /** Works the queue until `stop()` (or SIGTERM / SIGINT); resolves with the counts. */
  async run(): Promise<WorkerStats> {
    const onSignal = () => this.stop();
    if (this.#o.handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    this.#beatStopping = false;
    const heartbeat = this.#heartbeatLoop();
    const acker = this.#ackLoop();
    const keeper = setInterval(() => void this.#extendDue(), Math.max(50, Math.min(this.#o.leaseMs / 6, 1000)));
    try {
      await this.#claimLoop();
    } finally {
      try {
        await this.#shutdown();
        clearInterval(keeper);
        this.#reported?.();
        await acker;
      } finally {
        // the last call: leave the live workers list
        this.#beatStopping = true;
        this.#wakeBeat();
        await heartbeat;
      }
      if (this.#o.handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
    }
    return this.stats;
  }

  /** Beats until `#beatStopping`, then removes the entry (after any beat in flight). */
  async #heartbeatLoop(): Promise<void> {
    const client = this.queue.client;
    let refused = false;
    let beaten = false;
    while (!this.#beatStopping) {
      const next = Date.now() + this.#o.heartbeatMs;
      beaten = true;
      try {
        const registered = await client.beatWorker(this.id, {
          queues: [this.queue.name],
          concurrency: this.#o.concurrency,
          in_hand: this.#running.size,
          host: hostName(),
          pid: process.pid,
          version: VERSION,
          language: "typescript",
          ttl_ms: this.#o.heartbeatMs * HEARTBEAT_MISSES,
        });
        if (!registered && !refused) {
          this.#warn(new Error(`the workers registry is full (10000 live entries): worker ${this.id} is not listed; trying again at every beat`));
        }
        refused = !registered;
      } catch (e) {
        this.#warn(new Error(`heartbeat of worker ${this.id} failed; trying again at the next beat: ${(e as Error)?.message ?? String(e)}`, { cause: e }));
      }
      if (this.#beatStopping) break;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(0, next - Date.now()));
        this.#wakeBeat = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.#wakeBeat = () => {};
    }
    if (!beaten) return;
    try {
      await client.removeWorker(this.id);
    } catch (e) {
      this.#warn(new Error(`could not remove worker ${this.id} from the workers list; it expires by itself: ${(e as Error)?.message ?? String(e)}`, { cause: e }));
    }
  }

  async #claimLoop(): Promise<void> {
    let backoff = 100;
    // claim in batches: while tasks are in hand, wait for half a batch of free slots
    const low = Math.max(1, Math.floor(Math.min(this.#o.claimMax, this.#o.concurrency) / 2));
    while (!this.#stopping) {
      const free = this.#o.concurrency - this.#running.size;
      if (this.#running.size > 0 && free < low) {
        await Promise.race([new Promise<void>((r) => (this.#slotFreed = r)), this.#stopped]);
        continue;
      }
      let tasks: ClaimedTask[];
      try {
        tasks = await this.queue.claim({ max: Math.min(free, this.#o.claimMax), wait_ms: this.#o.pollMs, lease_ms: this.#o.leaseMs, worker_id: this.id });
        backoff = 100;
      } catch (e) {
        this.#warn(e);
        await Promise.race([sleep(backoff), this.#stopped]);
        backoff = Math.min(backoff * 2, 5000);
        continue;
      }
      this.stats.claimed += tasks.length;
      if (this.#stopping) {
        await this.#release(tasks);
        return;
      }
      // a long-poll answers as soon as it claimed: its leases started just before now
      const now = Date.now();
      for (const t of tasks) {
        const abort = new AbortController();
        const running: Running = { task: t, extendedAt: now, leaseDeadline: now + this.#o.leaseMs, extending: false, abort, done: Promise.resolve() };
        this.#running.set(key(t), running);
        running.done = this.#runOne(t, abort.signal);
      }
    }
  }

  async #runOne(task: ClaimedTask, signal: AbortSignal): Promise<void> {
    await Promise.resolve(); // registered in #running before the handler starts
    const run = await startRun(this.queue.name, task, this.#o.leaseMs);
    let v: Verdict;
    try {
      const r = (await run.active(() => this.#handler(task, { signal }))) as Retry | Fail | null | undefined;
      const kind = r && typeof r === "object" ? (r as { kind?: unknown }).kind : undefined;
      if (kind === "retry") v = { kind: "nack", error: (r as Retry).error, retry_in_ms: (r as Retry).inMs };
      else if (kind === "fail") v = { kind: "nack", error: (r as Fail).error, permanent: true };
      else v = { kind: "ack" };
    } catch (e) {
      // stopped by its signal: not a failure of the task; hand it back, the attempt not counted
      v = signal.aborted ? { kind: "release" } : { kind: "nack", error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) };
      if (v.kind === "nack") run.raised(e);
    }
    run.end(v);
    const k = key(task);
    this.#running.delete(k);
    this.#slotFreed?.();
    if (!this.#abandoned.has(k)) {
      this.#pending.push([task, v]);
      this.#reported?.();
    }
  }

  async #ackLoop(): Promise<void> {
    for (;;) {
      if (this.#pending.length === 0) {
        if (this.#stopping && this.#running.size === 0 && this.#shutdownDone) return;
        await new Promise<void>((r) => (this.#reported = r));
        this.#reported = null;
        continue;
      }
      const batch = this.#pending.splice(0, 1000);
      await this.#send(batch);
    }
  }

  #shutdownDone = false;

  async #send(batch: Array<[ClaimedTask, Verdict]>): Promise<void> {
    const releases = batch.filter(([, v]) => v.kind === "release").map(([t]) => t);
    if (releases.length) await this.#release(releases);
    let acks = batch.filter(([, v]) => v.kind === "ack").map(([t]) => t);
    let nacks = batch.flatMap(([t, v]) => (v.kind === "nack" ? [{ task: t, error: v.error, retry_in_ms: v.retry_in_ms, permanent: v.permanent }] : []));
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        if (acks.length) {
          const outcomes = await this.queue.ackBatch(acks);
          // a task whose partition failed is sent again, alone
          const again = acks.filter((_, i) => outcomes[i] === "failed");
          for (const o of outcomes) {
            if (o === "acked") this.stats.acked++;
            else if (o !== "failed") this.stats.lease_lost++;
          }
          acks = again;
        }
        if (nacks.length) {
          const results = await this.queue.nackBatch(nacks);
          const again = nacks.filter((_, i) => results[i]?.outcome === "failed");
          for (const r of results) {
            if (r.outcome === "rescheduled") this.stats.retried++;
            else if (r.outcome === "dead") this.stats.dead++;
            else if (r.outcome !== "failed") this.stats.lease_lost++;
          }
          nacks = again;
        }
        if (!acks.length && !nacks.length) return;
        this.#warn(new Error(`${acks.length + nacks.length} answers failed on their partition`));
        await sleep(200 * (attempt + 1));
      } catch (e) {
        // sending again is safe: an answer that did land is refused as lease_lost
        this.#warn(e);
        await sleep(200 * (attempt + 1));
      }
    }
    this.#warn(new Error(`gave up answering ${batch.length} tasks; their leases expire and they run again`));
  }

  /** The lease keeper's tick: aborts handlers whose lease ran out, extends the others'. */
  #extendDue(): void {
    const now = Date.now();
    for (const r of this.#running.values()) {
      if (r.abort.signal.aborted) continue;
      if (now >= r.leaseDeadline) {
        this.#abort(r, "lease_lost", `the lease of task ${r.task.id} ran out before it could be extended`);
        continue;
      }
      if (r.extending || now - r.extendedAt < this.#o.leaseMs / 3) continue;
      void this.#extendOne(r);
    }
  }

  async #extendOne(r: Running): Promise<void> {
    const sentAt = Date.now();
    r.extendedAt = sentAt;
    r.extending = true;
    try {
      if ((await this.queue.extend(r.task, this.#o.leaseMs)) === null) {
        this.#abort(r, "lease_lost", `task ${r.task.id}: the server answered lease_lost to an extend`);
      } else {
        r.leaseDeadline = sentAt + this.#o.leaseMs;
      }
    } catch (e) {
      this.#warn(e);
    } finally {
      r.extending = false;
    }
  }

  #abort(r: Running, kind: AbortKind, message: string): void {
    if (!r.abort.signal.aborted) r.abort.abort(new TaskAbortedError(kind, r.task.id, message));
  }

  /** Hands leases back. A task whose handler still runs must be in `#abandoned` first. */
  async #release(tasks: ClaimedTask[]): Promise<void> {
    if (!tasks.length) return;
    try {
      for (const o of await this.queue.releaseBatch(tasks)) o === "released" ? this.stats.released++ : this.stats.lease_lost++;
    } catch (e) {
      this.#warn(e instanceof DueqError ? e : new Error(String(e)));
    }
  }

  async #shutdown(): Promise<void> {
    this.#stopping = true;
    const running = [...this.#running.values()];
    if (running.length) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.all(running.map((r) => r.done)),
        new Promise<void>((r) => (timer = setTimeout(r, this.#o.graceMs))),
      ]);
      clearTimeout(timer);
    }
    const stuck = [...this.#running.values()];
    for (const r of stuck) {
      this.#running.delete(key(r.task));
      this.#abandoned.add(key(r.task));
    }
    for (const r of stuck) this.#abort(r, "shutdown", `the worker is stopping: task ${r.task.id} is handed back`);
    await this.#release(stuck.map((r) => r.task));
    this.#shutdownDone = true;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
