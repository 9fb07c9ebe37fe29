"""What the API answers, as typed values. Times are integer ms; ``*_at_ms``
are Unix epoch ms by the Redis server's clock."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, TypedDict, Union

__all__ = [
    "AckOutcome",
    "Backfilled",
    "Backoff",
    "DeadBulkResult",
    "PurgeResult",
    "RateLimit",
    "Readiness",
    "Schedule",
    "ScheduleSetOutcome",
    "SchedulesPage",
    "Settings",
    "SettingsChanges",
    "TaskPage",
    "Triggered",
    "Webhook",
    "CancelOutcome",
    "ClaimedTask",
    "DeadOutcome",
    "DeadPage",
    "DeadTask",
    "Enqueued",
    "NackOutcome",
    "NackResult",
    "QueueStats",
    "ReleaseOutcome",
    "RescheduleOutcome",
    "Rescheduled",
    "Task",
    "TaskSpec",
    "WorkerInfo",
]


class CancelOutcome(str, enum.Enum):
    """What a cancel did. Compares equal to its string (``"cancelled"``)."""

    CANCELLED = "cancelled"
    """It will never run."""
    IN_PROGRESS = "in_progress"
    """A worker is running it; untouched."""
    NOT_FOUND = "not_found"
    """No live task (finished, cancelled, or never there)."""


class RescheduleOutcome(str, enum.Enum):
    """What a reschedule did."""

    RESCHEDULED = "rescheduled"
    IN_PROGRESS = "in_progress"
    NOT_FOUND = "not_found"


class AckOutcome(str, enum.Enum):
    """What an ack did."""

    ACKED = "acked"
    LEASE_LOST = "lease_lost"
    """The lease token is no longer current (expired, taken over, task gone); nothing changed."""
    FAILED = "failed"
    """Its partition could not be reached or did not confirm: send it again."""


class NackOutcome(str, enum.Enum):
    """What a nack did."""

    RESCHEDULED = "rescheduled"
    DEAD = "dead"
    LEASE_LOST = "lease_lost"
    FAILED = "failed"
    """Its partition could not be reached or did not confirm: send it again."""


class ReleaseOutcome(str, enum.Enum):
    """What a release did."""

    RELEASED = "released"
    LEASE_LOST = "lease_lost"


class DeadOutcome(str, enum.Enum):
    """What a dead-letter retry or delete did."""

    RETRIED = "retried"
    DELETED = "deleted"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    """Retry refused: the task's business key is taken by another task (live, or in its
    unique window)."""


@dataclass(frozen=True)
class TaskSpec:
    """One task to enqueue (for :meth:`Queue.enqueue_batch`). Give at most one of
    ``delay_ms`` and ``due_at_ms``; neither means due now."""

    payload: Any = None
    key: Optional[str] = None
    delay_ms: Optional[int] = None
    due_at_ms: Optional[int] = None
    on_conflict: Optional[str] = None
    """``"keep"`` (default: return the live task), ``"replace"``, or ``"debounce"`` (a
    replace that never moves the due time past the first enqueue + ``debounce_max_ms``)."""
    max_attempts: Optional[int] = None
    lease_ms: Optional[int] = None
    group: Optional[str] = None
    """A tenant or customer: the queue's per-group limits apply to it, and groups are
    served round-robin."""
    priority: Optional[int] = None
    """0 (default, served first) to 9, among due tasks (within a group: the group's own)."""
    ttl_ms: Optional[int] = None
    """Expire the task unless it started this many ms after the write (not with
    ``expires_at_ms``)."""
    expires_at_ms: Optional[int] = None
    """Expire the task unless it started by this Unix epoch ms."""
    debounce_max_ms: Optional[int] = None
    """With ``on_conflict="debounce"`` (required there)."""
    replicas: Optional[int] = None
    """Durable write: answered only once this many replicas confirm it (0 to 16), else
    ``not_replicated`` (503). In a batch, the largest of its tasks' counts applies."""
    unique_for_ms: Optional[int] = None
    """Unique window (needs ``key``): after the task finished, its key stays taken this
    long, so an enqueue of the key meanwhile creates nothing (default: the queue's
    ``unique_for_ms`` setting, else none; 0 for none)."""
    headers: Optional[Mapping[str, str]] = None
    """Carried with the task and handed to whoever runs it: at most 32, names
    ``[A-Za-z0-9_.-]{1,64}`` (stored lower-case), values printable ASCII up to 1024 bytes,
    4096 bytes in all. With OpenTelemetry installed, the caller's trace context is added
    (``traceparent``, ``tracestate``) unless the headers hold a ``traceparent``."""

    def to_json(self) -> Dict[str, Any]:
        """The request body of this task (without the caller's trace context)."""
        body: Dict[str, Any] = {"payload": self.payload}
        for name in (
            "key",
            "delay_ms",
            "due_at_ms",
            "on_conflict",
            "max_attempts",
            "lease_ms",
            "group",
            "priority",
            "ttl_ms",
            "expires_at_ms",
            "debounce_max_ms",
            "replicas",
            "unique_for_ms",
        ):
            v = getattr(self, name)
            if v is not None:
                body[name] = v
        if self.headers is not None:
            body["headers"] = dict(self.headers)
        return body


@dataclass(frozen=True)
class Enqueued:
    """An enqueue's answer."""

    id: str
    due_at_ms: int
    created: bool
    """``False`` when the key was live (the existing task, kept or replaced), or in the
    unique window of a finished task (then ``state`` is set)."""
    state: Optional[str] = None
    """Only when the key is in a unique window: how the task ``id`` names finished
    (``succeeded``, ``dead``, ``cancelled`` or ``expired``); nothing was written."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Enqueued":
        return cls(
            id=d["id"], due_at_ms=d["due_at_ms"], created=d["created"], state=d.get("state")
        )


@dataclass(frozen=True)
class Task:
    """A task as stored."""

    id: str
    key: Optional[str]
    state: str
    """``scheduled``, ``active``, ``succeeded`` or ``dead``."""
    due_at_ms: int
    attempt: int
    max_attempts: int
    payload: Any
    last_error: Optional[str]
    created_at_ms: int
    group: Optional[str] = None
    priority: int = 0
    """0 (first) to 9."""
    expires_at_ms: Optional[int] = None
    """When it expires unless started (only while scheduled, if it has one)."""
    claimed_at_ms: Optional[int] = None
    """When the running attempt was claimed (only while active)."""
    worker_id: Optional[str] = None
    """The worker holding it, when its claim named one (only while active): a
    :class:`dueq.Worker`'s :attr:`~dueq.Worker.id`."""
    lease_expires_at_ms: Optional[int] = None
    """When the running attempt's lease runs out unless extended (only in
    :meth:`Queue.browse` of active tasks)."""
    headers: Dict[str, str] = field(default_factory=dict)
    """The headers it was enqueued with (names lower-case), trace context included."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Task":
        return cls(
            id=d["id"],
            key=d.get("key"),
            state=d["state"],
            due_at_ms=d["due_at_ms"],
            attempt=d["attempt"],
            max_attempts=d["max_attempts"],
            payload=d.get("payload"),
            last_error=d.get("last_error"),
            created_at_ms=d["created_at_ms"],
            group=d.get("group"),
            priority=d.get("priority", 0),
            expires_at_ms=d.get("expires_at_ms"),
            claimed_at_ms=d.get("claimed_at_ms"),
            worker_id=d.get("worker_id"),
            lease_expires_at_ms=d.get("lease_expires_at_ms"),
            headers=dict(d.get("headers") or {}),
        )


@dataclass(frozen=True)
class DeadTask:
    """A task in the dead-letter queue."""

    task: Task
    died_at_ms: int


@dataclass(frozen=True)
class DeadPage:
    """One page of the dead-letter queue, newest first."""

    total: int
    tasks: List[DeadTask]


@dataclass(frozen=True)
class Rescheduled:
    """A reschedule's answer: ``due_at_ms`` is set when ``outcome`` is ``rescheduled``."""

    outcome: RescheduleOutcome
    due_at_ms: Optional[int] = None


@dataclass(frozen=True)
class NackResult:
    """A nack's answer: ``due_at_ms`` (the next attempt) when ``outcome`` is ``rescheduled``."""

    outcome: NackOutcome
    due_at_ms: Optional[int] = None


@dataclass(frozen=True)
class ClaimedTask:
    """A task handed out by a claim: run it, then ack, nack or extend it."""

    queue: str
    id: str
    key: Optional[str]
    payload: Any
    attempt: int
    """This attempt, 1-based."""
    due_at_ms: int
    lease_token: str
    lease_expires_at_ms: int
    group: Optional[str] = None
    priority: int = 0
    """0 (first) to 9."""
    max_attempts: Optional[int] = None
    """Attempts allowed: a failure of this attempt sends the task to the dead-letter queue
    when ``attempt`` reached it (``None`` from servers that do not send it)."""
    claimed_at_ms: Optional[int] = None
    """When it was claimed, by the server's clock (``None`` from servers that do not send
    it); ``claimed_at_ms - due_at_ms`` is how late it started."""
    headers: Dict[str, str] = field(default_factory=dict)
    """The headers it was enqueued with (names lower-case), trace context included."""
    continues_trace: bool = False
    """Whether this run continues the producer's trace (its span a child of the producer's:
    the first attempt of a task that was due at once) or starts a new one that links to it
    (delayed, retried, or fired by a schedule)."""

    @classmethod
    def from_json(cls, queue: str, d: Mapping[str, Any]) -> "ClaimedTask":
        return cls(
            queue=queue,
            id=d["id"],
            key=d.get("key"),
            payload=d.get("payload"),
            attempt=d["attempt"],
            due_at_ms=d["due_at_ms"],
            lease_token=d["lease_token"],
            lease_expires_at_ms=d["lease_expires_at_ms"],
            group=d.get("group"),
            priority=d.get("priority", 0),
            max_attempts=d.get("max_attempts"),
            claimed_at_ms=d.get("claimed_at_ms"),
            headers=dict(d.get("headers") or {}),
            continues_trace=bool(d.get("continues_trace", False)),
        )


@dataclass(frozen=True)
class QueueStats:
    """Counts and timings of one queue."""

    queue: str
    scheduled: int
    """Tasks waiting (due ones and retries included)."""
    due: int
    """Of those, due now."""
    active: int
    dead: int
    succeeded_total: int
    failed_total: int
    next_due_at_ms: Optional[int]
    oldest_due_age_ms: int
    """How long the earliest due task has waited, ms (0 when none is overdue)."""
    paused: bool
    expired_total: int = 0
    """Tasks that expired before they started (``ttl_ms`` / ``expires_at_ms``), ever."""
    groups_waiting: int = 0
    """Groups with scheduled tasks."""
    behind: bool = False
    """Over its alert threshold (``alert_due_age_ms`` or ``alert_due_count``)."""
    concurrency_limit: Optional[int] = None
    """The queue's concurrency limit, if set."""
    throttled: Optional[str] = None
    """The limit holding due work back now: ``"rate"`` or ``"concurrency"`` (``None``: none)."""
    extra: Dict[str, Any] = field(default_factory=dict)
    """Fields this client version does not know (newer servers)."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "QueueStats":
        known = {
            "queue", "scheduled", "due", "active", "dead", "succeeded_total",
            "failed_total", "next_due_at_ms", "oldest_due_age_ms", "paused",
            "expired_total", "groups_waiting", "behind", "concurrency_limit", "throttled",
        }  # fmt: skip
        return cls(
            queue=d["queue"],
            scheduled=d["scheduled"],
            due=d["due"],
            active=d["active"],
            dead=d["dead"],
            succeeded_total=d["succeeded_total"],
            failed_total=d["failed_total"],
            next_due_at_ms=d.get("next_due_at_ms"),
            oldest_due_age_ms=d["oldest_due_age_ms"],
            paused=d["paused"],
            expired_total=d.get("expired_total", 0),
            groups_waiting=d.get("groups_waiting", 0),
            behind=d.get("behind", False),
            concurrency_limit=d.get("concurrency_limit"),
            throttled=d.get("throttled"),
            extra={k: v for k, v in d.items() if k not in known},
        )


@dataclass(frozen=True)
class QueuesPage:
    """One page of the server's queues, sorted by name (``GET /v1/queues``)."""

    queues: List[QueueStats]
    total: int
    """Queues known in all (every page)."""
    next: Optional[str]
    """Pass as ``after`` for the next page; ``None`` when this page reached the end."""


@dataclass(frozen=True)
class WorkerInfo:
    """One live worker process or server (``GET /v1/workers``), as its last heartbeat
    described it."""

    id: str
    """Id of its registration (``host:pid:random``)."""
    kind: str
    """``worker`` (any worker, whatever its language) or ``server`` (``dueq serve``)."""
    host: str
    pid: int
    version: str
    """The dueq version (a client worker: its client's version)."""
    queues: List[str]
    """Queues it takes work from (a server: the queues it pushes to webhooks)."""
    concurrency: int
    """Most handlers it runs at once."""
    in_hand: int
    """Handlers running at its last heartbeat."""
    started_at_ms: int
    """First heartbeat."""
    last_seen_ms: int
    """Last heartbeat."""
    expires_at_ms: int
    """When it leaves the list unless it beats again."""
    language: str
    """The language of its program: ``rust`` (dueq's own), ``python``, ``typescript``, ..."""
    extra: Dict[str, Any] = field(default_factory=dict)
    """Fields this client version does not know (newer servers)."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "WorkerInfo":
        known = {
            "id", "kind", "host", "pid", "version", "queues", "concurrency", "in_hand",
            "started_at_ms", "last_seen_ms", "expires_at_ms", "language",
        }  # fmt: skip
        return cls(
            id=d["id"],
            kind=d["kind"],
            host=d["host"],
            pid=d["pid"],
            version=d["version"],
            queues=list(d["queues"]),
            concurrency=d["concurrency"],
            in_hand=d["in_hand"],
            started_at_ms=d["started_at_ms"],
            last_seen_ms=d["last_seen_ms"],
            expires_at_ms=d["expires_at_ms"],
            # servers older than the language field listed only Rust processes
            language=d.get("language", "rust"),
            extra={k: v for k, v in d.items() if k not in known},
        )


@dataclass(frozen=True)
class TaskPage:
    """One page of live tasks (:meth:`Queue.browse`)."""

    tasks: List[Task]
    """Scheduled tasks in due order, or active ones in lease-deadline order."""
    next: Optional[str]
    """Pass as ``after`` for the next page; ``None`` when this page reached the end."""


@dataclass(frozen=True)
class DeadBulkResult:
    """What :meth:`Queue.dead_retry_matching` or :meth:`Queue.dead_delete_matching` did."""

    looked_at: int
    """Dead tasks looked at."""
    matched: int
    """Of those, the ones the filter matched (with ``dry_run``: the count)."""
    done: int
    """Retried or deleted."""
    conflicts: int
    """Retries refused: the task's business key is taken by another task (live, or in its
    unique window)."""
    cursor: Optional[str]
    """Set when work is left: call again with ``cursor=`` and the same filters."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "DeadBulkResult":
        return cls(d["looked_at"], d["matched"], d["done"], d["conflicts"], d.get("cursor"))


@dataclass(frozen=True)
class PurgeResult:
    """What :meth:`Queue.purge` did."""

    dropped: int
    """Tasks dropped by this call."""
    left: int
    """Tasks of that state still there: 0 when done, else call again."""


@dataclass(frozen=True)
class Backoff:
    """Retry delays of a queue: ``min(max_ms, base_ms * factor ** (attempt - 1))``, with
    20 % jitter."""

    base_ms: int
    factor: float
    max_ms: int

    def to_json(self) -> Dict[str, Any]:
        return {"base_ms": self.base_ms, "factor": self.factor, "max_ms": self.max_ms}


@dataclass(frozen=True)
class RateLimit:
    """At most ``max`` tasks handed out in any window of ``per_ms``."""

    max: int
    per_ms: int

    def to_json(self) -> Dict[str, Any]:
        return {"max": self.max, "per_ms": self.per_ms}


@dataclass(frozen=True)
class Settings:
    """A queue's settings (:meth:`Queue.settings`); ``None`` is the built-in default."""

    max_attempts: Optional[int] = None
    lease_ms: Optional[int] = None
    backoff: Optional[Backoff] = None
    dead_max: Optional[int] = None
    succeeded_max: Optional[int] = None
    rate_limit: Optional[RateLimit] = None
    group_rate_limit: Optional[RateLimit] = None
    concurrency: Optional[int] = None
    group_concurrency: Optional[int] = None
    alert_due_age_ms: Optional[int] = None
    alert_due_count: Optional[int] = None
    on_expire: Optional[str] = None
    """``drop`` or ``dead``."""
    partitions: Optional[int] = None
    unique_for_ms: Optional[int] = None
    """Unique window of keyed tasks enqueued without their own, ms."""
    extra: Dict[str, Any] = field(default_factory=dict)
    """Settings this client version does not know (newer servers)."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Settings":
        objects = {"backoff": Backoff, "rate_limit": RateLimit, "group_rate_limit": RateLimit}
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        args: Dict[str, Any] = {}
        for k in known:
            v = d.get(k)
            args[k] = objects[k](**v) if k in objects and v is not None else v
        return cls(**args, extra={k: v for k, v in d.items() if k not in known})


class ScheduleSetOutcome(str, enum.Enum):
    """What :meth:`Queue.set_schedule` did."""

    CREATED = "created"
    REPLACED = "replaced"
    UNCHANGED = "unchanged"
    """The same definition again: nothing changed (also what a retried call may answer)."""


@dataclass(frozen=True)
class Schedule:
    """A stored schedule and its state."""

    queue: str
    name: str
    cron: Optional[str]
    every_ms: Optional[int]
    tz: Optional[str]
    """Time zone of ``cron`` (``None``: UTC)."""
    payload: Any
    misfire: str
    """``skip`` or ``fire_once``."""
    misfire_grace_ms: int
    overlap: str
    """``allow`` or ``skip``."""
    max_attempts: int
    lease_ms: int
    priority: int
    group: Optional[str]
    unique_for_ms: Optional[int]
    """Unique window of each tick's key (``None``: the queue's setting)."""
    next_fire_at_ms: Optional[int]
    """``None`` while paused."""
    upcoming_ms: List[int]
    """The next fire times (empty while paused)."""
    last_fire_at_ms: Optional[int]
    skipped_total: int
    fired_total: int
    paused: bool
    outcome: Optional[ScheduleSetOutcome] = None
    """Only in the answer to :meth:`Queue.set_schedule`."""
    headers: Dict[str, str] = field(default_factory=dict)
    """Headers of each tick's task."""
    extra: Dict[str, Any] = field(default_factory=dict)
    """Fields this client version does not know (newer servers)."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Schedule":
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        args: Dict[str, Any] = {k: d.get(k) for k in known}
        args["upcoming_ms"] = list(d.get("upcoming_ms") or [])
        args["headers"] = dict(d.get("headers") or {})
        if args["outcome"] is not None:
            args["outcome"] = ScheduleSetOutcome(args["outcome"])
        return cls(**args, extra={k: v for k, v in d.items() if k not in known})


@dataclass(frozen=True)
class SchedulesPage:
    """One page of a queue's schedules, sorted by name."""

    schedules: List[Schedule]
    total: int
    """Schedules of the queue in all (every page)."""
    next: Optional[str]
    """Pass as ``after`` for the next page; ``None`` when this page reached the end."""


@dataclass(frozen=True)
class Triggered:
    """The task :meth:`Queue.trigger_schedule` enqueued (due now)."""

    id: str
    key: str
    """``schedule:{name}:manual:{ms}``."""
    due_at_ms: int


@dataclass(frozen=True)
class Backfilled:
    """What :meth:`Queue.backfill_schedule` did."""

    ticks: int
    """Ticks in the range."""
    created: int
    """Tasks enqueued for them."""
    existing: int
    """Ticks whose task was still scheduled or running (kept, not duplicated)."""


@dataclass(frozen=True)
class Webhook:
    """A queue's push delivery target (:meth:`Queue.webhook`)."""

    queue: str
    url: str
    """The target (a password in it shows as ``***``, except in :meth:`Queue.set_webhook`'s
    answer)."""
    concurrency: int
    timeout_ms: int
    updated_at_ms: int
    last_error: Optional[str] = None
    """The error of the last failed delivery, if any."""
    last_error_at_ms: Optional[int] = None
    secret: Optional[str] = None
    """The ``whsec_`` signing secret: only in :meth:`Queue.set_webhook`'s answer."""
    secret_generated: Optional[bool] = None
    """In :meth:`Queue.set_webhook`'s answer: whether this call generated the secret."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Webhook":
        return cls(
            queue=d["queue"],
            url=d["url"],
            concurrency=d["concurrency"],
            timeout_ms=d["timeout_ms"],
            updated_at_ms=d["updated_at_ms"],
            last_error=d.get("last_error"),
            last_error_at_ms=d.get("last_error_at_ms"),
            secret=d.get("secret"),
            secret_generated=d.get("secret_generated"),
        )


@dataclass(frozen=True)
class Readiness:
    """The server's readiness (``GET /readyz``)."""

    ready: bool
    """Every check passes."""
    redis: bool
    scripts: bool
    eviction_safe: bool
    eviction_policy: Optional[str]
    checks: Dict[str, bool]
    """Extra checks by name (``postgres``)."""
    error: Optional[str]
    """The first problem, if any."""
    test_clock: Optional["ClockReading"] = None
    """The test clock, when the server runs it (``dueq serve --test-clock``)."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Readiness":
        clock = d.get("test_clock")
        return cls(
            ready=d["ready"],
            redis=d["redis"],
            scripts=d["scripts"],
            eviction_safe=d["eviction_safe"],
            eviction_policy=d.get("eviction_policy"),
            checks=dict(d.get("checks") or {}),
            error=d.get("error"),
            test_clock=None if clock is None else ClockReading.from_json(clock),
        )


@dataclass(frozen=True)
class ClockReading:
    """The test clock at one moment (``GET /v1/test/clock``)."""

    now_ms: int
    """The virtual time, Unix epoch ms: what every queue of the server takes as now."""
    offset_ms: int
    """How far the virtual time is ahead of the Redis server's own clock, ms."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ClockReading":
        return cls(now_ms=d["now_ms"], offset_ms=d["offset_ms"])


class SettingsChanges(TypedDict, total=False):
    """The keyword arguments of :meth:`Queue.update_settings`: each one given is set (``None``:
    back to the default), each one left out stays as it is."""

    max_attempts: Optional[int]
    """Attempts of tasks enqueued without their own, 1 to 65535 (default 5)."""
    lease_ms: Optional[int]
    """Lease of tasks enqueued without their own, 1000 to 4294967295 ms (default 30000)."""
    backoff: Optional[Union[Backoff, Mapping[str, Any]]]
    """Retry delays (default: 1 s doubling to 1 h)."""
    dead_max: Optional[int]
    """Dead-letter cap, 1 to 100000000 (default 10000)."""
    succeeded_max: Optional[int]
    """Succeeded tasks kept for lookup, 0 to 100000000 (default 0)."""
    rate_limit: Optional[Union[RateLimit, Mapping[str, Any]]]
    """Over the whole queue (default none)."""
    group_rate_limit: Optional[Union[RateLimit, Mapping[str, Any]]]
    """Of each group on its own (default none)."""
    concurrency: Optional[int]
    """Most tasks active at once over the queue, 1 to 1000000 (default none)."""
    group_concurrency: Optional[int]
    """Most tasks of one group active at once, 1 to 1000000 (default none)."""
    alert_due_age_ms: Optional[int]
    """The queue is behind when its oldest due task waited this long (default none)."""
    alert_due_count: Optional[int]
    """The queue is behind when this many tasks are due (default none)."""
    on_expire: Optional[str]
    """``"drop"`` (default) or ``"dead"``: what happens to a task that expired unstarted."""
    partitions: Optional[int]
    """1 to 1024 (default 1); changed only while the queue holds no task."""
    unique_for_ms: Optional[int]
    """Unique window of keyed tasks enqueued without their own, 0 to 31622400000 ms
    (default none)."""
