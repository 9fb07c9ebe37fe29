"""A queue's schedules: recurring tasks by cron pattern or fixed interval."""

from __future__ import annotations

import urllib.parse
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ._base import QueueBase, every_page, seg
from .models import Backfilled, Schedule, SchedulesPage, Triggered

__all__ = ["ScheduleOps"]


class ScheduleOps(QueueBase):
    def schedules(self) -> List[Schedule]:
        """Every schedule of the queue, sorted by name: every page of
        :meth:`schedules_page` (one request per 1000)."""
        def page(after: Optional[str]) -> Tuple[List[Schedule], Optional[str]]:
            p = self.schedules_page(limit=1000, after=after)
            return p.schedules, p.next

        return every_page(page)

    def schedules_page(self, limit: int = 100, after: Optional[str] = None) -> SchedulesPage:
        """One page of the queue's schedules, sorted by name: at most ``limit`` (1 to 1000)
        after the name ``after`` (a page's ``next``; ``None``: from the start)."""
        query = {"limit": str(limit)}
        if after is not None:
            query["after"] = after
        r = self._call("GET", "/schedules?" + urllib.parse.urlencode(query), retry=True)
        return SchedulesPage(
            [Schedule.from_json(s) for s in r["schedules"]], r["total"], r.get("next")
        )

    def schedule(self, name: str) -> Optional[Schedule]:
        """The schedule ``name`` with its next fire times; ``None`` when there is none."""
        r = self._found("GET", "/schedules/" + seg("name", name), retry=True)
        return None if r is None else Schedule.from_json(r)

    def set_schedule(
        self,
        name: str,
        *,
        cron: Optional[str] = None,
        every_ms: Optional[int] = None,
        tz: Optional[str] = None,
        payload: Any = None,
        misfire: Optional[str] = None,
        misfire_grace_ms: Optional[int] = None,
        overlap: Optional[str] = None,
        max_attempts: Optional[int] = None,
        lease_ms: Optional[int] = None,
        priority: Optional[int] = None,
        group: Optional[str] = None,
        unique_for_ms: Optional[int] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> Schedule:
        """Creates or replaces the schedule ``name`` (``[A-Za-z0-9_.-]{1,128}``): give
        exactly one of ``cron`` (5 fields, minute first, or 6, seconds first; wall-clock
        times in ``tz``, an IANA zone, default UTC) and ``every_ms`` (1000 or more). Each
        tick enqueues ``payload`` with the task options given. ``misfire``: ``"skip"``
        (default) or ``"fire_once"`` for ticks not started within ``misfire_grace_ms``;
        ``overlap``: ``"allow"`` (default) or ``"skip"`` while the last tick's task is live.
        ``headers`` go with every tick's task as given (no trace context is added: each tick
        starts a trace of its own).

        The answer's ``outcome`` says what it did: ``CREATED``, ``REPLACED`` or
        ``UNCHANGED``. Retried (a second try stores the same definition and may answer
        ``UNCHANGED``). Raises :class:`InvalidInputError` naming the bad field."""
        body: Dict[str, Any] = {"payload": payload}
        for k, v in (
            ("cron", cron),
            ("every_ms", every_ms),
            ("tz", tz),
            ("misfire", misfire),
            ("misfire_grace_ms", misfire_grace_ms),
            ("overlap", overlap),
            ("max_attempts", max_attempts),
            ("lease_ms", lease_ms),
            ("priority", priority),
            ("group", group),
            ("unique_for_ms", unique_for_ms),
        ):
            if v is not None:
                body[k] = v
        if headers is not None:
            body["headers"] = dict(headers)
        return Schedule.from_json(self._call("PUT", "/schedules/" + seg("name", name), body, retry=True))

    def delete_schedule(self, name: str) -> bool:
        """Deletes the schedule (tasks it already enqueued stay); ``False`` when there was
        none. Not retried."""
        return self._found("DELETE", "/schedules/" + seg("name", name), retry=False) is not None

    def pause_schedule(self, name: str) -> Schedule:
        """Pauses the schedule: no tick fires or counts until it is resumed. Retried.
        Raises :class:`NotFoundError` when there is no such schedule."""
        return Schedule.from_json(self._call("POST", f"/schedules/{seg('name', name)}/pause", retry=True))

    def resume_schedule(self, name: str) -> Schedule:
        """Resumes the schedule at its first tick after now (ticks during the pause are not
        fired). Retried. Raises :class:`NotFoundError` when there is no such schedule."""
        return Schedule.from_json(self._call("POST", f"/schedules/{seg('name', name)}/resume", retry=True))

    def trigger_schedule(self, name: str) -> Triggered:
        """Enqueues the schedule's task once, due now (key ``schedule:{name}:manual:{ms}``),
        without moving its ticks. Not retried (a second try enqueues a second task).
        Raises :class:`NotFoundError` when there is no such schedule."""
        r = self._call("POST", f"/schedules/{seg('name', name)}/trigger", retry=False)
        return Triggered(r["id"], r["key"], r["due_at_ms"])

    def backfill_schedule(self, name: str, from_ms: int, to_ms: int) -> Backfilled:
        """Enqueues one task per tick of the past range ``[from_ms, to_ms)`` (epoch ms, at most
        10 000 ticks), each due now and keyed as its tick, so a tick whose task is still
        waiting is not enqueued twice. Not retried: those tasks are due at once, and a tick
        whose task already ran would be enqueued again. Raises :class:`NotFoundError` when
        there is no such schedule."""
        body = {"from_ms": from_ms, "to_ms": to_ms}
        r = self._call("POST", f"/schedules/{seg('name', name)}/backfill", body, retry=False)
        return Backfilled(r["ticks"], r["created"], r["existing"])
