// What the API answers, as types. Field names are the API's (snake_case), so
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
  /** Durable write: answer only once this many replicas confirm it (0 to 16), else `not_replicated`. */
  replicas?: number;
  /** Unique window, ms (needs `key`): after the task finished its key stays taken this long,
   * so an enqueue of the key meanwhile creates nothing (default: the queue's
   * `unique_for_ms` setting, else none; 0 for none). */
  unique_for_ms?: number;
  /** Carried with the task and handed to whoever runs it: at most 32, names
   * `[A-Za-z0-9_.-]{1,64}` (stored lower-case), values printable ASCII up to 1024 bytes,
   * 4096 bytes in all. With `@opentelemetry/api` loaded, the caller's trace context is added
   * (`traceparent`, `tracestate`) unless the headers hold a `traceparent`. */
  headers?: Record<string, string>;
}

/** Options of `enqueue` (a `TaskSpec` without the payload). */
export type EnqueueOptions = Omit<TaskSpec, "payload">;

export interface Enqueued {
  id: string;
  due_at_ms: number;
  /** `false`: the key was live (the existing task, kept or replaced), or in the unique
   * window of a finished task (then `state` is set). */
  created: boolean;
  /** Only when the key is in a unique window: how the task `id` names finished; nothing was
   * written. */
  state?: FinishedState | null;
}

/** How a task ended, as an enqueue in its key's unique window answers it. */
export type FinishedState = "succeeded" | "dead" | "cancelled" | "expired";

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
  priority: number;
  /** When it expires unless started (only while scheduled, if it has one). */
  expires_at_ms?: number | null;
  /** When the running attempt was claimed (only while active). */
  claimed_at_ms?: number | null;
  /** The worker holding it, when its claim named one (only while active): a `Worker`'s `id`. */
  worker_id?: string | null;
  /** The headers it was enqueued with (names lower-case), trace context included. */
  headers: Record<string, string>;
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
  priority: number;
  /** Attempts allowed: a failure of this attempt sends the task to the dead-letter queue when
   * `attempt` reached it (absent from servers that do not send it). */
  max_attempts?: number;
  /** When it was claimed, by the server's clock (absent from servers that do not send it);
   * minus `due_at_ms`, how late it started. */
  claimed_at_ms?: number;
  /** The headers it was enqueued with (names lower-case), trace context included. */
  headers: Record<string, string>;
  /** Whether this run continues the producer's trace (its span a child of the producer's:
   * the first attempt of a task that was due at once) or starts a new one that links to it
   * (delayed, retried, or fired by a schedule). */
  continues_trace: boolean;
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
  /** Failed attempts (nack or expired lease), ever. */
  failed_total: number;
  /** Tasks that expired before they started (`ttl_ms` / `expires_at_ms`), ever. */
  expired_total: number;
  next_due_at_ms: number | null;
  /** How long the earliest due task has waited, ms (0 when none is overdue). */
  oldest_due_age_ms: number;
  paused: boolean;
  /** Groups with scheduled tasks. */
  groups_waiting: number;
  /** Over its alert threshold (`alert_due_age_ms` or `alert_due_count`). */
  behind: boolean;
  /** The queue's concurrency limit, if set. */
  concurrency_limit: number | null;
  /** The limit holding due work back now: `rate` or `concurrency` (`null`: none). */
  throttled: string | null;
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

/** A live task as `browse` lists it. */
export interface BrowsedTask extends Task {
  /** For an active task, when its lease runs out unless extended (epoch ms). */
  lease_expires_at_ms: number | null;
}

/** Options of `browse`: which live tasks, one page at a time. */
export interface BrowseOptions {
  /** `scheduled` (default: in due order) or `active` (in lease-deadline order). */
  state?: "scheduled" | "active";
  /** The `next` of the previous page (absent: from the start). */
  after?: string;
  /** At most this many, 1 to 1000. Default 50. */
  limit?: number;
}

/** One page of live tasks (`GET /v1/queues/{queue}/tasks`). */
export interface TaskPage {
  tasks: BrowsedTask[];
  /** Pass as `after` for the next page; `null` when this page reached the end. */
  next: string | null;
}

/** What `Queue.delete` did: `not_empty` while tasks are scheduled or running (use `force`). */
export type DeleteQueueOutcome = "deleted" | "not_found" | "not_empty";

/** The states a purge drops. */
export type PurgeState = "scheduled" | "dead" | "succeeded";

export interface PurgeResult {
  /** Tasks dropped by this request. */
  dropped: number;
  /** Tasks of that state still there: 0 when done, else purge again. */
  left: number;
}

/** Which dead tasks a bulk retry or delete takes; all filters AND-ed, none: every dead task. */
export interface DeadFilter {
  /** The last error contains this text (case-sensitive), 1 to 4096 bytes. */
  error_contains?: string;
  /** Died at or after this time, epoch ms. */
  died_after_ms?: number;
  /** Died before this time, epoch ms. Default: when the run started (its first request). */
  died_before_ms?: number;
  /** Its business key starts with this, 1 to 4096 bytes. */
  key_prefix?: string;
  /** It belongs to this group, 1 to 256 bytes. */
  group?: string;
  /** Most tasks to act on in this request. Default: every match. */
  limit?: number;
  /** Only count the matches; change nothing. */
  dry_run?: boolean;
  /** Retry only: spread the due times over this many ms from now (at most 30 days). */
  spread_ms?: number;
  /** The `cursor` of the previous answer, to go on where it stopped (send the same filters). */
  cursor?: string;
}

export interface DeadBulkResult {
  /** Dead tasks looked at. */
  looked_at: number;
  /** Of those, the ones the filter matched (with `dry_run`: the count). */
  matched: number;
  /** Retried or deleted. */
  done: number;
  /** Retries refused: the task's key is taken by another task (live, or in its unique window). */
  conflicts: number;
  /** Present when work is left: send the same filter again with it. */
  cursor?: string | null;
}

/** A schedule to create or replace: give exactly one of `cron` and `every_ms`. */
export interface ScheduleSpec {
  /** Cron pattern: 5 fields (minute first) or 6 (seconds first), wall-clock times in `tz`. */
  cron?: string;
  /** Fixed interval, ms, 1000 or more: fire times are whole multiples of it since the epoch. */
  every_ms?: number;
  /** IANA time zone of `cron` (`Europe/Berlin`). Default UTC. */
  tz?: string;
  /** Payload of every task (any JSON value). Default `null`. */
  payload?: unknown;
  /** Ticks whose task has not started `misfire_grace_ms` after their time: `skip` (default) or `fire_once`. */
  misfire?: "skip" | "fire_once";
  /** How late a tick's task may still start, ms, 100 to 86400000. Default 1000. */
  misfire_grace_ms?: number;
  /** `allow` (default) or `skip` (while the previous tick's task is live). */
  overlap?: "allow" | "skip";
  /** Attempts of each task, 1 to 65535. Default 5. */
  max_attempts?: number;
  /** Lease of each task, ms. Default 30000. */
  lease_ms?: number;
  /** Priority of each task, 0 (first) to 9. */
  priority?: number;
  /** Group of each task, 1 to 256 bytes. */
  group?: string;
  /** Unique window of each tick's key, ms (default: the queue's `unique_for_ms` setting). */
  unique_for_ms?: number;
  /** Headers of each tick's task, as given (no trace context is added: each tick starts a
   * trace of its own). */
  headers?: Record<string, string>;
}

/** A schedule as the server keeps it. */
export interface Schedule {
  queue: string;
  name: string;
  cron: string | null;
  every_ms: number | null;
  /** Time zone of `cron` (`null`: UTC). */
  tz: string | null;
  payload: unknown;
  misfire: "skip" | "fire_once";
  misfire_grace_ms: number;
  overlap: "allow" | "skip";
  max_attempts: number;
  lease_ms: number;
  priority: number;
  group: string | null;
  /** Unique window of each tick's key, ms (`null`: the queue's setting). */
  unique_for_ms: number | null;
  /** Headers of each tick's task (`{}` when none). */
  headers: Record<string, string>;
  /** Next fire time (epoch ms, Redis clock); `null` while paused. */
  next_fire_at_ms: number | null;
  /** The next 5 fire times (empty while paused). */
  upcoming_ms: number[];
  /** Fire time of the last tick fired. */
  last_fire_at_ms: number | null;
  /** Ticks not fired (missed under `skip`, or skipped for overlap). */
  skipped_total: number;
  /** Tasks enqueued by ticks. */
  fired_total: number;
  paused: boolean;
  /** Only in the answer to `setSchedule`: what it did. */
  outcome?: "created" | "replaced" | "unchanged" | null;
}

/** One page of a queue's schedules, sorted by name. */
export interface SchedulesPage {
  schedules: Schedule[];
  /** Schedules of the queue in all (every page). */
  total: number;
  /** Pass as `after` for the next page; `null` when this page reached the end. */
  next: string | null;
}

/** The task `triggerSchedule` enqueued: due now, key `schedule:{name}:manual:{ms}`. */
export interface Triggered {
  id: string;
  key: string;
  due_at_ms: number;
}

/** A past range of a schedule's ticks: `from_ms` inclusive, `to_ms` exclusive (at most now), epoch ms. */
export interface BackfillRange {
  from_ms: number;
  to_ms: number;
}

export interface Backfilled {
  /** Ticks in the range. */
  ticks: number;
  /** Tasks enqueued for them. */
  created: number;
  /** Ticks whose task was still scheduled or running (kept, not duplicated). */
  existing: number;
}

export interface Backoff {
  /** Delay after the first failed attempt, 1 to 2592000000 ms. */
  base_ms: number;
  /** Growth per attempt, 1.0 to 100.0. */
  factor: number;
  /** Longest delay, `base_ms` to 2592000000 ms. */
  max_ms: number;
}

export interface RateLimit {
  /** Tasks per window, 1 to 1000000. */
  max: number;
  /** Window, 1 to 86400000 ms. */
  per_ms: number;
}

/** A queue's settings; `null`: the default. */
export interface QueueSettings {
  /** Attempts of tasks enqueued without their own, 1 to 65535 (default 5). */
  max_attempts: number | null;
  /** Lease of tasks enqueued without their own, ms (default 30000). */
  lease_ms: number | null;
  /** Retry delays (default: 1 s doubling to 1 h). */
  backoff: Backoff | null;
  /** Dead-letter cap (default 10000). */
  dead_max: number | null;
  /** Succeeded tasks kept for lookup (default 0). */
  succeeded_max: number | null;
  /** Rate limit over the whole queue (default none). */
  rate_limit: RateLimit | null;
  /** Rate limit of each group on its own (default none). */
  group_rate_limit: RateLimit | null;
  /** Most tasks active at once over the queue (default none). */
  concurrency: number | null;
  /** Most tasks of one group active at once (default none). */
  group_concurrency: number | null;
  /** The queue is behind when its oldest due task waited this long, ms (default none). */
  alert_due_age_ms: number | null;
  /** The queue is behind when this many tasks are due (default none). */
  alert_due_count: number | null;
  /** An expired task is dropped (`drop`, the default) or dead-lettered (`dead`). */
  on_expire: "drop" | "dead" | null;
  /** Partitions the queue is split into, 1 to 1024 (default 1). */
  partitions: number | null;
  /** Unique window of keyed tasks enqueued without their own, ms (default none). */
  unique_for_ms: number | null;
}

/** Settings to change: only the fields given; `null` puts one back to its default. */
export type SettingsChanges = Partial<QueueSettings>;

/** A queue's push delivery target (`PUT /v1/queues/{queue}/webhook`). */
export interface WebhookSpec {
  /** Where tasks are POSTed: `http://` or `https://`, at most 2048 bytes. */
  url: string;
  /** `whsec_` and the base64 of 24 to 64 bytes. Default: keep the current one, or generate one. */
  secret?: string;
  /** Most deliveries in flight per server, 1 to 1000. Default 10. */
  concurrency?: number;
  /** Time limit of one delivery, ms, 1 to 300000. Default 10000. */
  timeout_ms?: number;
}

/** A queue's webhook. */
export interface Webhook {
  queue: string;
  /** The target (`webhook()` shows a password in it as `***`). */
  url: string;
  concurrency: number;
  timeout_ms: number;
  updated_at_ms: number;
  /** The error of the last failed delivery (`null`: none). */
  last_error: string | null;
  last_error_at_ms: number | null;
  /** The signing secret: only in the answer to `setWebhook` (keep it). */
  secret?: string | null;
  /** In the answer to `setWebhook`: whether this call generated the secret. */
  secret_generated?: boolean | null;
}

/** `GET /healthz`. */
export interface Health {
  status: string;
}

/** `GET /readyz`: whether the server can serve (Redis reachable, scripts loaded, eviction policy). */
export interface Readiness {
  ready: boolean;
  redis: boolean;
  scripts: boolean;
  eviction_policy: string | null;
  /** `false` when Redis may evict queue keys (a policy other than `noeviction`). */
  eviction_safe: boolean;
  /** Extra checks by name, `true` when passed. */
  checks: Record<string, boolean>;
  /** The first problem, if any. */
  error: string | null;
  /** The test clock, when the server runs it (`dueq serve --test-clock`); absent otherwise. */
  test_clock?: ClockReading | null;
}

/** The test clock at one moment (`GET /v1/test/clock`). */
export interface ClockReading {
  /** The virtual time, Unix epoch ms: what every queue of the server takes as now. */
  now_ms: number;
  /** How far the virtual time is ahead of the Redis server's own clock, ms. */
  offset_ms: number;
}
