"""Producing and looking after tasks: enqueue, get, cancel, reschedule, browse."""

from __future__ import annotations

import urllib.parse
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

from . import _tracing
from ._base import QueueBase, code_of, seg
from .errors import DueqError
from .models import (
    CancelOutcome,
    Enqueued,
    RescheduleOutcome,
    Rescheduled,
    Task,
    TaskPage,
    TaskSpec,
)

__all__ = ["TaskOps"]


class TaskOps(QueueBase):
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
        replicas: Optional[int] = None,
        unique_for_ms: Optional[int] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> Enqueued:
        """Enqueues one task (``payload``: any JSON value). With a live ``key``, returns the
        existing task (``created=False``), or replaces it with ``on_conflict="replace"``
        (or ``"debounce"`` with ``debounce_max_ms``). ``priority`` 0-9 orders due tasks;
        ``ttl_ms`` / ``expires_at_ms`` expire a task that has not started. ``replicas`` asks
        for a durable write (``not_replicated`` when fewer replicas confirm it in time).
        ``unique_for_ms`` keeps the key taken that long after the task finished: an enqueue
        of it meanwhile answers the finished task (``created=False``, ``state`` set).
        ``headers`` (name to value, see :attr:`TaskSpec.headers`) travel with the task to
        its worker; with OpenTelemetry installed, the caller's trace context is added to them
        unless they hold a ``traceparent``.

        Retried (see :class:`dueq.Client`) only with a ``key`` and ``on_conflict`` ``keep``:
        the server keeps one task per live key, so a second try adds nothing (it may answer
        ``created=False`` for the task the first try created). Otherwise a ``timeout`` may
        mean the task was written.

        Raises :class:`DueqError`: ``invalid_input`` (bad field), ``in_progress`` (replace of
        a running task), ``unique_window`` (replace of a key in a finished task's unique
        window), ``payload_too_large``, ``redis_unavailable``.
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
            replicas,
            unique_for_ms,
            headers,
        )
        body = spec.to_json()
        _tracing.inject(body)
        r = self._call("POST", "/tasks", body, retry=_repeatable(body))
        return Enqueued.from_json(r)

    def enqueue_batch(
        self, tasks: Iterable[Union[TaskSpec, Mapping[str, Any]]]
    ) -> List[Union[Enqueued, DueqError]]:
        """Enqueues up to 1000 tasks in one atomic call (a :class:`TaskSpec` or a dict with
        the same fields each); one result per task, in order: :class:`Enqueued`, or a
        :class:`DueqError` value (``in_progress``) for a task refused alone. A bad task
        raises ``invalid_input`` and nothing is written. Retried only when every task has a
        ``key`` and keeps an existing task under it (``on_conflict`` ``keep``). Each task
        carries the caller's trace context as :meth:`enqueue` does."""
        body = [t.to_json() if isinstance(t, TaskSpec) else dict(t) for t in tasks]
        for t in body:
            _tracing.inject(t)
        repeatable = bool(body) and all(_repeatable(t) for t in body)
        r = self._call("POST", "/tasks/batch", {"tasks": body}, retry=repeatable)
        out: List[Union[Enqueued, DueqError]] = []
        for item in r["results"]:
            if "error" in item:
                out.append(DueqError.from_response(409, item))
            else:
                out.append(Enqueued.from_json(item))
        return out

    def _target(self, id: Optional[str], key: Optional[str]) -> str:
        if (id is None) == (key is None):
            raise ValueError("give exactly one of id and key")
        if id is not None:
            return "/tasks/" + seg("id", id)
        assert key is not None
        return "/keys/" + seg("key", key)

    def get(self, id: Optional[str] = None, *, key: Optional[str] = None) -> Optional[Task]:
        """The task by id, or by business key (the live task under the key, else the newest
        dead one); ``None`` when there is none. A dead task is found by either, with
        ``state == "dead"``."""
        r = self._found("GET", self._target(id, key), retry=True)
        return None if r is None else Task.from_json(r)

    def cancel(self, id: Optional[str] = None, *, key: Optional[str] = None) -> CancelOutcome:
        """Cancels a scheduled task: ``CANCELLED`` (it will never run), ``IN_PROGRESS`` (a
        worker runs it; untouched) or ``NOT_FOUND``. Not retried: a second try would answer
        ``NOT_FOUND`` for the task the first one cancelled."""
        status, body = self._request("DELETE", self._target(id, key), retry=False)
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
        """Moves a scheduled task's due time (give ``delay_ms`` or ``due_at_ms``). Retried by
        id: a second try sets the same due time (with ``delay_ms``, counted from the retry).
        Not retried by key: between the tries the key may pass to a newer task."""
        body: Dict[str, Any] = {}
        if delay_ms is not None:
            body["delay_ms"] = delay_ms
        if due_at_ms is not None:
            body["due_at_ms"] = due_at_ms
        status, r = self._request("PATCH", self._target(id, key), body, retry=id is not None)
        if status == 200:
            return Rescheduled(RescheduleOutcome.RESCHEDULED, r["due_at_ms"])
        code = code_of(r)
        if status == 409 and code == "in_progress":
            return Rescheduled(RescheduleOutcome.IN_PROGRESS)
        if status == 404 and code == "not_found":
            return Rescheduled(RescheduleOutcome.NOT_FOUND)
        raise DueqError.from_response(status, r)

    def browse(
        self, state: str = "scheduled", *, limit: int = 50, after: Optional[str] = None
    ) -> TaskPage:
        """One page of live tasks: ``state="scheduled"`` in due order, or ``"active"`` in
        lease-deadline order (with :attr:`Task.lease_expires_at_ms`); at most ``limit`` (1 to
        1000), after the cursor ``after`` (a page's ``next``; ``None``: from the start)."""
        query = {"state": state, "limit": str(limit)}
        if after is not None:
            query["after"] = after
        r = self._call("GET", "/tasks?" + urllib.parse.urlencode(query), retry=True)
        return TaskPage([Task.from_json(t) for t in r["tasks"]], r.get("next"))


def _repeatable(task: Mapping[str, Any]) -> bool:
    """Whether sending this enqueue twice makes one task: it has a key, and a second try
    keeps the task the first one made (``replace`` and ``debounce`` would change it)."""
    return task.get("key") is not None and task.get("on_conflict", "keep") in (None, "keep")
