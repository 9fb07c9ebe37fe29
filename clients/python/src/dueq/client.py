"""``Client`` and ``Queue``: every call of the HTTP API (DESIGN 4.2) as a method.

Expected outcomes come back as values (``CancelOutcome.IN_PROGRESS``, ``None`` for a task
that is not there, ``AckOutcome.LEASE_LOST``); only failures raise :class:`DueqError`.
"""

from __future__ import annotations

import ssl
import urllib.parse
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import DueqError
from ._http import Transport
from .models import (
    AckOutcome,
    CancelOutcome,
    ClaimedTask,
    DeadOutcome,
    DeadPage,
    DeadTask,
    Enqueued,
    NackOutcome,
    NackResult,
    QueueStats,
    QueuesPage,
    ReleaseOutcome,
    RescheduleOutcome,
    Rescheduled,
    Task,
    TaskSpec,
    WorkerInfo,
)

__all__ = ["Client", "Queue", "MAX_BATCH"]

MAX_BATCH = 1000
"""Most items in one batch request (enqueue, acks, nacks, releases) and one claim."""

Lease = Union[ClaimedTask, Tuple[str, str]]
"""A claimed task, or its ``(id, lease_token)``."""


def _seg(s: str) -> str:
    # every character outside the unreserved set encoded, "/" included (keys may hold any)
    return urllib.parse.quote(s, safe="")


def _lease(t: Lease) -> Tuple[str, str]:
    if isinstance(t, ClaimedTask):
        return t.id, t.lease_token
    return t[0], t[1]


class Client:
    """A dueq server at ``url`` (``http://127.0.0.1:7878``), with its bearer ``token`` when
    the server has tokens. Thread-safe: each thread keeps its own keep-alive connection.

    ``timeout_s`` bounds one request (a long-poll claim adds its ``wait_ms``).
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:7878",
        token: Optional[str] = None,
        *,
        timeout_s: float = 30.0,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        self.url = url
        self._timeout_s = timeout_s
        self._t = Transport(url, token, timeout_s, ssl_context)

    def queue(self, name: str) -> "Queue":
        """A handle on queue ``name`` (``[A-Za-z0-9_.-]{1,128}``, not ``.`` or ``..``). No
        request is sent."""
        return Queue(self, name)

    def queues(self) -> List[QueueStats]:
        """Statistics of every queue that has had a task, sorted by name: every page of
        :meth:`queues_page` (one request per 1000 queues)."""
        out: List[QueueStats] = []
        after: Optional[str] = None
        while True:
            page = self.queues_page(limit=1000, after=after)
            out.extend(page.queues)
            if page.next is None:
                return out
            after = page.next

    def queues_page(self, limit: int = 100, after: Optional[str] = None) -> QueuesPage:
        """One page of queue statistics, sorted by name: at most ``limit`` (1 to 1000) queues
        after the name ``after`` (a page's ``next``; ``None``: from the start)."""
        query = {"limit": str(limit)}
        if after is not None:
            query["after"] = after
        body = self._call("GET", "/v1/queues?" + urllib.parse.urlencode(query))
        return QueuesPage(
            queues=[QueueStats.from_json(q) for q in body["queues"]],
            total=body["total"],
            next=body.get("next"),
        )

    # --- the live workers list ---------------------------------------------------------

    def workers(self, queue: Optional[str] = None) -> List[WorkerInfo]:
        """Every live worker process and server (``GET /v1/workers``), in any language,
        sorted by start time, then id; with ``queue``, only those that serve that queue."""
        path = "/v1/workers"
        if queue is not None:
            path += "?" + urllib.parse.urlencode({"queue": queue})
        return [WorkerInfo.from_json(w) for w in self._call("GET", path)["workers"]]

    def beat_worker(
        self,
        id: str,
        queues: Sequence[str],
        *,
        concurrency: int,
        in_hand: int = 0,
        host: Optional[str] = None,
        pid: Optional[int] = None,
        version: Optional[str] = None,
        language: Optional[str] = None,
        ttl_ms: Optional[int] = None,
    ) -> bool:
        """Registers worker ``id`` in the live workers list, or refreshes its entry
        (``PUT /v1/workers/{id}``; what :class:`dueq.Worker` does every ``heartbeat_ms``).
        ``id``: printable ASCII without spaces, 1 to 200 bytes; ``queues``: at most 1000
        queue names; ``in_hand``: handlers running now; ``ttl_ms``: how long the entry stays
        listed without another beat, 100 to 180000 (default 15000). Whether it is listed
        (``False``: the registry holds 10 000 live entries).

        Raises :class:`DueqError` ``invalid_input`` naming the bad field (nothing written).
        """
        body: Dict[str, Any] = {
            "queues": list(queues),
            "concurrency": concurrency,
            "in_hand": in_hand,
        }
        for name, v in (
            ("host", host),
            ("pid", pid),
            ("version", version),
            ("language", language),
            ("ttl_ms", ttl_ms),
        ):
            if v is not None:
                body[name] = v
        return bool(self._call("PUT", "/v1/workers/" + _seg(id), body)["registered"])

    def remove_worker(self, id: str) -> bool:
        """Takes worker ``id`` off the live workers list at once (``DELETE
        /v1/workers/{id}``, a graceful stop); whether it was listed."""
        status, body = self._request("DELETE", "/v1/workers/" + _seg(id))
        if status == 404 and _code(body) == "not_found":
            return False
        if status != 200:
            raise DueqError.from_response(status, body)
        return True

    def close(self) -> None:
        """Closes the calling thread's connection."""
        self._t.close()

    def _request(
        self, method: str, path: str, body: Any = None, timeout_s: Optional[float] = None
    ) -> Tuple[int, Any]:
        return self._t.request(method, path, body, timeout_s)

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        ok: Sequence[int] = (200, 201),
        timeout_s: Optional[float] = None,
    ) -> Any:
        status, parsed = self._request(method, path, body, timeout_s)
        if status not in ok:
            raise DueqError.from_response(status, parsed)
        return parsed

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Queue:
    """Operations on one queue. Cheap; get one from :meth:`Client.queue`."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name
        self._base = "/v1/queues/" + _seg(name)

    # --- producing -------------------------------------------------------------------------

    def enqueue(
        self,
        payload: Any = None,
        *,
        key: Optional[str] = None,
        delay_ms: Optional[int] = None,
        due_at_ms: Optional[int] = None,
        on_conflict: Optional[str] = None,
        max_attempts: Optional[int] = None,
        lease_ms: Optional[int] = None,
        group: Optional[str] = None,
        priority: Optional[int] = None,
        ttl_ms: Optional[int] = None,
        expires_at_ms: Optional[int] = None,
        debounce_max_ms: Optional[int] = None,
    ) -> Enqueued:
        """Enqueues one task (``payload``: any JSON value). With a live ``key``, returns the
        existing task (``created=False``), or replaces it with ``on_conflict="replace"``
        (or ``"debounce"`` with ``debounce_max_ms``). ``priority`` 0-9 orders due tasks;
        ``ttl_ms`` / ``expires_at_ms`` expire a task that has not started (docs/OPTIONS.md).

        Raises :class:`DueqError`: ``invalid_input`` (bad field), ``in_progress`` (replace of
        a running task), ``payload_too_large``, ``redis_unavailable``.
        """
        spec = TaskSpec(
            payload,
            key,
            delay_ms,
            due_at_ms,
            on_conflict,
            max_attempts,
            lease_ms,
            group,
            priority,
            ttl_ms,
            expires_at_ms,
            debounce_max_ms,
        )
        return Enqueued.from_json(self.client._call("POST", self._base + "/tasks", spec.to_json()))

    def enqueue_batch(
        self, tasks: Iterable[Union[TaskSpec, Mapping[str, Any]]]
    ) -> List[Union[Enqueued, DueqError]]:
        """Enqueues up to 1000 tasks in one atomic call (a :class:`TaskSpec` or a dict with
        the same fields each); one result per task, in order: :class:`Enqueued`, or a
        :class:`DueqError` value (``in_progress``) for a task refused alone. A bad task
        raises ``invalid_input`` and nothing is written."""
        body = [t.to_json() if isinstance(t, TaskSpec) else dict(t) for t in tasks]
        r = self.client._call("POST", self._base + "/tasks/batch", {"tasks": body})
        out: List[Union[Enqueued, DueqError]] = []
        for item in r["results"]:
            if "error" in item:
                out.append(DueqError.from_response(409, item))
            else:
                out.append(Enqueued.from_json(item))
        return out

    # --- by id or key ----------------------------------------------------------------------

    def _target(self, id: Optional[str], key: Optional[str]) -> str:
        if (id is None) == (key is None):
            raise ValueError("give exactly one of id and key")
        if id is not None:
            return self._base + "/tasks/" + _seg(id)
        assert key is not None
        return self._base + "/keys/" + _seg(key)

    def get(self, id: Optional[str] = None, *, key: Optional[str] = None) -> Optional[Task]:
        """The task by id or live business key; ``None`` when there is none."""
        status, body = self.client._request("GET", self._target(id, key))
        if status == 404 and _code(body) == "not_found":
            return None
        if status != 200:
            raise DueqError.from_response(status, body)
        return Task.from_json(body)

    def cancel(self, id: Optional[str] = None, *, key: Optional[str] = None) -> CancelOutcome:
        """Cancels a scheduled task: ``CANCELLED`` (it will never run), ``IN_PROGRESS`` (a
        worker runs it; untouched) or ``NOT_FOUND``."""
        status, body = self.client._request("DELETE", self._target(id, key))
        if status in (200, 404, 409) and isinstance(body, dict) and "outcome" in body:
            return CancelOutcome(body["outcome"])
        raise DueqError.from_response(status, body)

    def reschedule(
        self,
        id: Optional[str] = None,
        *,
        key: Optional[str] = None,
        delay_ms: Optional[int] = None,
        due_at_ms: Optional[int] = None,
    ) -> Rescheduled:
        """Moves a scheduled task's due time (give ``delay_ms`` or ``due_at_ms``)."""
        body: Dict[str, Any] = {}
        if delay_ms is not None:
            body["delay_ms"] = delay_ms
        if due_at_ms is not None:
            body["due_at_ms"] = due_at_ms
        status, r = self.client._request("PATCH", self._target(id, key), body)
        if status == 200:
            return Rescheduled(RescheduleOutcome.RESCHEDULED, r["due_at_ms"])
        code = _code(r)
        if status == 409 and code == "in_progress":
            return Rescheduled(RescheduleOutcome.IN_PROGRESS)
        if status == 404 and code == "not_found":
            return Rescheduled(RescheduleOutcome.NOT_FOUND)
        raise DueqError.from_response(status, r)

    # --- the queue ------------------------------------------------------------------------

    def stats(self) -> Optional[QueueStats]:
        """The queue's counts; ``None`` for a queue that never had a task."""
        status, body = self.client._request("GET", self._base)
        if status == 404 and _code(body) == "not_found":
            return None
        if status != 200:
            raise DueqError.from_response(status, body)
        return QueueStats.from_json(body)

    def pause(self) -> bool:
        """Stops handing out tasks; returns ``True`` (paused)."""
        return bool(self.client._call("POST", self._base + "/pause")["paused"])

    def resume(self) -> bool:
        """Hands out tasks again; returns ``False`` (not paused)."""
        return bool(self.client._call("POST", self._base + "/resume")["paused"])

    # --- dead letters ---------------------------------------------------------------------

    def dead_list(self, offset: int = 0, limit: int = 20) -> DeadPage:
        """One page of the dead-letter queue, newest first (``limit`` 1 to 1000)."""
        r = self.client._call("GET", f"{self._base}/dead?offset={offset}&limit={limit}")
        tasks = [DeadTask(Task.from_json(t), t["died_at_ms"]) for t in r["tasks"]]
        return DeadPage(total=r["total"], tasks=tasks)

    def dead_retry(self, id: str) -> DeadOutcome:
        """Schedules a dead task again, due now: ``RETRIED``, ``NOT_FOUND`` or ``CONFLICT``
        (its key is live on another task)."""
        status, r = self.client._request("POST", f"{self._base}/dead/{_seg(id)}/retry")
        return _dead_outcome(status, r)

    def dead_delete(self, id: str) -> DeadOutcome:
        """Deletes a dead task for good: ``DELETED`` or ``NOT_FOUND``."""
        status, r = self.client._request("DELETE", f"{self._base}/dead/{_seg(id)}")
        return _dead_outcome(status, r)

    # --- the pull protocol (what :class:`dueq.Worker` uses) -------------------------------

    def claim(
        self,
        max: int = 1,
        wait_ms: int = 0,
        lease_ms: Optional[int] = None,
        *,
        worker_id: Optional[str] = None,
    ) -> List[ClaimedTask]:
        """Claims up to ``max`` (1 to 1000) due tasks, waiting up to ``wait_ms`` (0 to 60000)
        for the first one; each under a lease of ``lease_ms`` (default: the task's own).

        ``worker_id`` (1 to 200 bytes of printable ASCII without spaces; the workers send their ``id``) is
        kept with each lease: while the task runs, :meth:`get` shows it as
        :attr:`Task.worker_id`."""
        body: Dict[str, Any] = {"max": max, "wait_ms": wait_ms}
        if lease_ms is not None:
            body["lease_ms"] = lease_ms
        if worker_id is not None:
            body["worker_id"] = worker_id
        r = self.client._call(
            "POST",
            self._base + "/claim",
            body,
            timeout_s=self.client._timeout_s + wait_ms / 1000.0,
        )
        return [ClaimedTask.from_json(self.name, t) for t in r["tasks"]]

    def ack(self, task: Lease) -> AckOutcome:
        """Completes a claimed task: ``ACKED`` or ``LEASE_LOST`` (nothing changed)."""
        return self.ack_batch([task])[0]

    def ack_batch(self, tasks: Sequence[Lease]) -> List[AckOutcome]:
        """Completes many claimed tasks, one request per 1000; one outcome per task, in order
        (a stale token refuses only its own task)."""
        out: List[AckOutcome] = []
        for chunk in _chunks(tasks):
            items = [{"id": i, "lease_token": t} for i, t in map(_lease, chunk)]
            r = self.client._call("POST", self._base + "/acks", {"acks": items})
            out.extend(AckOutcome(x["outcome"]) for x in r["results"])
        return out

    def nack(
        self,
        task: Lease,
        error: Optional[str] = None,
        *,
        retry_in_ms: Optional[int] = None,
        permanent: bool = False,
    ) -> NackResult:
        """Fails the current attempt: retried after ``retry_in_ms`` (default: the queue's
        backoff) or dead-lettered (``permanent`` or out of attempts). ``error`` is kept as
        the task's ``last_error``."""
        return self.nack_batch([(task, error, retry_in_ms, permanent)])[0]

    def nack_batch(
        self, items: Sequence[Tuple[Lease, Optional[str], Optional[int], bool]]
    ) -> List[NackResult]:
        """Fails many attempts, one request per 1000: items are ``(task, error, retry_in_ms,
        permanent)``; one result per item, in order."""
        out: List[NackResult] = []
        for chunk in _chunks(items):
            body = []
            for task, error, retry_in_ms, permanent in chunk:
                i, t = _lease(task)
                n: Dict[str, Any] = {"id": i, "lease_token": t}
                if error is not None:
                    n["error"] = error
                if retry_in_ms is not None:
                    n["retry_in_ms"] = retry_in_ms
                if permanent:
                    n["permanent"] = True
                body.append(n)
            r = self.client._call("POST", self._base + "/nacks", {"nacks": body})
            out.extend(
                NackResult(NackOutcome(x["outcome"]), x.get("due_at_ms")) for x in r["results"]
            )
        return out

    def release_batch(self, tasks: Sequence[Lease]) -> List[ReleaseOutcome]:
        """Hands leases back unfinished: each task is due again at once and the attempt is
        not counted (what a stopping worker does with tasks it did not run)."""
        out: List[ReleaseOutcome] = []
        for chunk in _chunks(tasks):
            items = [{"id": i, "lease_token": t} for i, t in map(_lease, chunk)]
            r = self.client._call("POST", self._base + "/releases", {"releases": items})
            out.extend(ReleaseOutcome(x["outcome"]) for x in r["results"])
        return out

    def extend(self, task: Lease, lease_ms: int) -> Optional[int]:
        """Extends a lease to ``lease_ms`` from now; the new deadline (epoch ms), or ``None``
        when the lease was lost."""
        i, t = _lease(task)
        status, r = self.client._request(
            "POST",
            f"{self._base}/tasks/{_seg(i)}/extend",
            {"lease_token": t, "lease_ms": lease_ms},
        )
        if status == 200:
            return int(r["lease_expires_at_ms"])
        if status == 409 and _code(r) == "lease_lost":
            return None
        raise DueqError.from_response(status, r)


def _code(body: Any) -> Optional[str]:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        c = body["error"].get("code")
        return c if isinstance(c, str) else None
    return None


def _dead_outcome(status: int, r: Any) -> DeadOutcome:
    if status == 200:
        return DeadOutcome(r["outcome"])
    code = _code(r)
    if status == 404 and code == "not_found":
        return DeadOutcome.NOT_FOUND
    if status == 409 and code == "conflict":
        return DeadOutcome.CONFLICT
    raise DueqError.from_response(status, r)


def _chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), MAX_BATCH):
        yield items[i : i + MAX_BATCH]
