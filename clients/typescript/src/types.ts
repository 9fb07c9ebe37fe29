// What the API answers (DESIGN 4.2), as types. Field names are the API's (snake_case), so
// the JSON of `examples/curl.md` and these types read the same. Times are integer ms;
// `*_at_ms` are Unix epoch ms by the Redis server's clock.

/** A task by id (a string or `{ id }`) or by live business key (`{ key }`). */
export type TaskRef = string | { id: string } | { key: string };

/** One task to enqueue. Give at most one of `delay_ms` and `due_at_ms` (neither: due now). */
export interface TaskSpec {
  /** Any JSON value (default `null`). */
  payload?: unknown;
  /** Business key, 1 to 512 bytes of UTF-8, unique among the queue's live tasks (not `.` or `..`). */
  key?: string;
  delay_ms?: number;
  due_at_ms?: number;
  /** With a live `key`: `keep` (default: return the live task), `replace`, or `debounce`
   * (a replace that never moves the due time past the first enqueue + `debounce_max_ms`). */
  on_conflict?: "keep" | "replace" | "debounce";
  /** With `on_conflict: "debounce"` (required there), ms. */
  debounce_max_ms?: number;
  /** 0 (default, served first) to 9, among due tasks (within a group: the group's own). */
  priority?: number;
  /** Expire the task unless it started this many ms after the write (not with `expires_at_ms`). */
  ttl_ms?: number;
  /** Expire the task unless it started by this Unix epoch ms. */
  expires_at_ms?: number;
  /** Attempts before the dead-letter queue, 1 to 65535 (default 5). */
  max_attempts?: number;
  /** Lease of a claim, ms (default 30000). */
  lease_ms?: number;
  /** A tenant or customer: the queue's per-group limits apply to it, and groups are served round-robin. */
  group?: string;
}

/** Options of `enqueue` (a `TaskSpec` without the payload). */
export type EnqueueOptions = Omit<TaskSpec, "payload">;

export interface Enqueued {
  id: string;
  due_at_ms: number;
  /** `false`: the key was live; the existing task (kept or replaced). */
  created: boolean;
}

export type TaskState = "scheduled" | "active" | "succeeded" | "dead";

export interface Task {
  id: string;
  key: string | null;
  state: TaskState;
  due_at_ms: number;
  attempt: number;
  max_attempts: number;
  payload: unknown;
  last_error: string | null;
  created_at_ms: number;
  /** Its group, if any. */
  group?: string | null;
  /** Its priority, 0 (first) to 9. */
  priority?: number;
  /** When it expires unless started (only while scheduled, if it has one). */
  expires_at_ms?: number | null;
  /** When the running attempt was claimed (only while active). */
  claimed_at_ms?: number | null;
  /** The worker holding it, when its claim named one (only while active): a `Worker`'s `id`. */
  worker_id?: string | null;
}

export interface DeadTask extends Task {
  died_at_ms: number;
}

export interface DeadPage {
  total: number;
  /** Newest first. */
  tasks: DeadTask[];
}

/** Options of a claim (`POST /v1/queues/{queue}/claim`). */
export interface ClaimOptions {
  /** Most tasks, 1 to 1000. Default 1. */
  max?: number;
  /** Wait up to this long for the first due task, ms, 0 to 60000. Default 0. */
  wait_ms?: number;
  /** Lease of these tasks, ms (default: each task's own). */
  lease_ms?: number;
  /** The claiming worker's id (1 to 200 bytes of printable ASCII without spaces), kept with each lease: an
   * active task shows it as `worker_id`. The `Worker` sends its `id`. */
  worker_id?: string;
}

/** A task handed out by a claim: run it, then ack, nack or extend it. */
export interface ClaimedTask {
  id: string;
  key: string | null;
  payload: unknown;
  /** This attempt, 1-based. */
  attempt: number;
  due_at_ms: number;
  lease_token: string;
  lease_expires_at_ms: number;
  /** Its group, if any. */
  group?: string | null;
  /** Its priority, 0 (first) to 9. */
  priority?: number;
}

export interface QueueStats {
  queue: string;
  /** Tasks waiting (due ones and retries included). */
  scheduled: number;
  /** Of those, due now. */
  due: number;
  active: number;
  dead: number;
  succeeded_total: number;
  failed_total: number;
  next_due_at_ms: number | null;
  oldest_due_age_ms: number;
  paused: boolean;
}

/** One page of the server's queues, sorted by name (`GET /v1/queues`). */
export interface QueuesPage {
  queues: QueueStats[];
  /** Queues known in all (every page). */
  total: number;
  /** Pass as `after` for the next page; `null` when this page reached the end. */
  next: string | null;
}

export type CancelOutcome = "cancelled" | "in_progress" | "not_found";
export type RescheduleOutcome = "rescheduled" | "in_progress" | "not_found";
/** `failed`: its partition could not be reached or did not confirm; send it again. */
export type AckOutcome = "acked" | "lease_lost" | "failed";
/** `failed`: its partition could not be reached or did not confirm; send it again. */
export type NackOutcome = "rescheduled" | "dead" | "lease_lost" | "failed";
export type ReleaseOutcome = "released" | "lease_lost";
export type DeadOutcome = "retried" | "deleted" | "not_found" | "conflict";

export interface Rescheduled {
  outcome: RescheduleOutcome;
  /** Set when `outcome` is `rescheduled`. */
  due_at_ms?: number;
}

export interface NackResult {
  outcome: NackOutcome;
  /** The next attempt's due time, when `outcome` is `rescheduled`. */
  due_at_ms?: number;
}

/** A failed attempt to report: `error` is kept as the task's `last_error`. */
export interface NackOptions {
  error?: string;
  /** Retry after this many ms (default: the queue's backoff). */
  retry_in_ms?: number;
  /** Straight to the dead-letter queue. */
  permanent?: boolean;
}

/** A claimed task or its `{ id, lease_token }`. */
export type Lease = Pick<ClaimedTask, "id" | "lease_token">;

/** One live worker process or server (`GET /v1/workers`), as its last heartbeat described it. */
export interface WorkerInfo {
  /** Id of its registration (`host:pid:random`). */
  id: string;
  /** `worker` (any worker, whatever its language) or `server` (`dueq serve`). */
  kind: "worker" | "server";
  host: string;
  pid: number;
  /** The dueq version (a client's worker: its client's version). */
  version: string;
  /** Queues it takes work from (a server: the queues it pushes to webhooks). */
  queues: string[];
  /** Most handlers it runs at once. */
  concurrency: number;
  /** Handlers running at its last heartbeat. */
  in_hand: number;
  /** First heartbeat. */
  started_at_ms: number;
  /** Last heartbeat. */
  last_seen_ms: number;
  /** When it leaves the list unless it beats again. */
  expires_at_ms: number;
  /** The language of its program: `rust` (dueq's own), `python`, `typescript`, ... */
  language: string;
}

/** A heartbeat of a worker (`PUT /v1/workers/{id}`): what the live workers list shows of it. */
export interface WorkerBeat {
  /** Queues it takes work from (at most 1000 queue names). */
  queues: string[];
  /** Most handlers it runs at once. */
  concurrency: number;
  /** Handlers running now. */
  in_hand: number;
  /** Its host name (at most 256 bytes). */
  host?: string;
  /** Its process id. */
  pid?: number;
  /** Its client's version (at most 256 bytes). */
  version?: string;
  /** Its language, e.g. `typescript` (at most 256 bytes). */
  language?: string;
  /** How long it stays listed without another beat, ms, 100 to 180000. Default 15000. */
  ttl_ms?: number;
}
