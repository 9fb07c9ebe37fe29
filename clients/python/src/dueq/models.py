"""What the API answers, as typed values (DESIGN 4.2). Times are integer ms; ``*_at_ms``
are Unix epoch ms by the Redis server's clock."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

__all__ = [
    "AckOutcome",
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
    """Retry refused: the task's business key is live on another task."""


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

    def to_json(self) -> Dict[str, Any]:
        """The request body of this task."""
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
        ):
            v = getattr(self, name)
            if v is not None:
                body[name] = v
        return body


@dataclass(frozen=True)
class Enqueued:
    """An enqueue's answer."""

    id: str
    due_at_ms: int
    created: bool
    """``False`` when the key was live: the existing task (kept or replaced)."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Enqueued":
        return cls(id=d["id"], due_at_ms=d["due_at_ms"], created=d["created"])


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
    paused: bool
    extra: Dict[str, Any] = field(default_factory=dict)
    """Fields this client version does not know (newer servers)."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "QueueStats":
        known = {
            "queue", "scheduled", "due", "active", "dead", "succeeded_total",
            "failed_total", "next_due_at_ms", "oldest_due_age_ms", "paused",
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
