"""``Client`` and ``Queue``: every call of the HTTP API as a method.

Expected outcomes come back as values (``CancelOutcome.IN_PROGRESS``, ``None`` for a task
that is not there, ``AckOutcome.LEASE_LOST``); only failures raise :class:`DueqError`.
:class:`Queue` is put together from one part per resource (``_tasks``, ``_pull``, ``_dead``,
``_admin``, ``_schedules``); :mod:`dueq.aio` wraps these same methods for asyncio.
"""

from __future__ import annotations

import logging
import ssl
import time
import urllib.parse
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ._admin import AdminOps
from ._base import MAX_BATCH, Lease, code_of, every_page, seg
from ._dead import DeadOps
from ._http import Transport
from ._pull import PullOps
from ._retry import RETRY_STATUSES, RetryPolicy
from ._schedules import ScheduleOps
from ._tasks import TaskOps
from ._test_clock import TestClock
from .errors import ConnectionFailedError, DueqError, TimeoutError_
from .models import QueueStats, QueuesPage, Readiness, WorkerInfo

__all__ = ["Client", "Lease", "Queue", "MAX_BATCH"]

log = logging.getLogger("dueq.client")


class Client:
    """A dueq server at ``url`` (``http://127.0.0.1:7878``), with its bearer ``token`` when
    the server has tokens. Thread-safe: each thread keeps its own keep-alive connection.

    ``timeout_s`` bounds one request (a long-poll claim adds its ``wait_ms``).

    Calls that are safe to repeat (reads, keyed enqueues, settings and schedule writes; each
    method's doc says) are sent again up to ``retries`` times (0: never) when the server was
    not reached (``connection_failed``), did not answer in time (``timeout``) or answered 503
    or 408, after a wait of ``retry_base_ms`` doubling each time up to ``retry_max_ms``, less
    up to half at random. Other calls raise at the first failure.
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:7878",
        token: Optional[str] = None,
        *,
        timeout_s: float = 30.0,
        ssl_context: Optional[ssl.SSLContext] = None,
        retries: int = 2,
        retry_base_ms: int = 100,
        retry_max_ms: int = 2000,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be more than 0, got {timeout_s!r}")
        self.url = url
        self.timeout_s = timeout_s
        self.retry_policy = RetryPolicy(retries, retry_base_ms, retry_max_ms)
        self._t = Transport(url, token, timeout_s, ssl_context)

    def queue(self, name: str) -> "Queue":
        """A handle on queue ``name`` (``[A-Za-z0-9_.-]{1,128}``, not ``.`` or ``..``). No
        request is sent."""
        return Queue(self, name)

    def queues(self) -> List[QueueStats]:
        """Statistics of every queue that has had a task, sorted by name: every page of
        :meth:`queues_page` (one request per 1000 queues)."""
        def page(after: Optional[str]) -> Tuple[List[QueueStats], Optional[str]]:
            p = self.queues_page(limit=1000, after=after)
            return p.queues, p.next

        return every_page(page)

    def queues_page(self, limit: int = 100, after: Optional[str] = None) -> QueuesPage:
        """One page of queue statistics, sorted by name: at most ``limit`` (1 to 1000) queues
        after the name ``after`` (a page's ``next``; ``None``: from the start)."""
        query = {"limit": str(limit)}
        if after is not None:
            query["after"] = after
        body = self._call("GET", "/v1/queues?" + urllib.parse.urlencode(query), retry=True)
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
        return [WorkerInfo.from_json(w) for w in self._call("GET", path, retry=True)["workers"]]

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
        (``False``: the registry holds 10 000 live entries). Retried.

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
        return bool(self._call("PUT", "/v1/workers/" + seg("id", id), body, retry=True)["registered"])

    def remove_worker(self, id: str) -> bool:
        """Takes worker ``id`` off the live workers list at once (``DELETE
        /v1/workers/{id}``, a graceful stop); whether it was listed. Not retried."""
        status, body = self._request("DELETE", "/v1/workers/" + seg("id", id), retry=False)
        if status == 404 and code_of(body) == "not_found":
            return False
        if status != 200:
            raise DueqError.from_response(status, body)
        return True

    # --- the server -------------------------------------------------------------------------

    @property
    def test_clock(self) -> TestClock:
        """The test clock of a server started with ``dueq serve --test-clock``: read it and
        move it forward in integration tests (:class:`dueq.TestClock`). No request is sent
        until a method of it is called."""
        return TestClock(self)

    def health(self) -> bool:
        """Whether the server process answers (``GET /healthz``; Redis not checked)."""
        status, body = self._request("GET", "/healthz", retry=True)
        return status == 200 and isinstance(body, dict) and body.get("status") == "ok"

    def ready(self) -> Readiness:
        """The server's readiness (``GET /readyz``): Redis reachable, scripts loaded, eviction
        policy safe. A server that is not ready answers too (``ready=False``); it is not
        retried then."""
        status, body = self._request("GET", "/readyz", retry=False)
        if status in (200, 503) and isinstance(body, dict) and "ready" in body:
            return Readiness.from_json(body)
        raise DueqError.from_response(status, body)

    def metrics(self) -> str:
        """The server's Prometheus metrics, as text (``GET /metrics``)."""
        text = self._call("GET", "/metrics", retry=True)
        if not isinstance(text, str):
            raise DueqError(200, "unexpected_response", repr(text)[:500])
        return text

    def openapi(self) -> Dict[str, Any]:
        """The server's OpenAPI document (``GET /openapi.json``)."""
        doc = self._call("GET", "/openapi.json", retry=True)
        if not isinstance(doc, dict):
            raise DueqError(200, "unexpected_response", repr(doc)[:500])
        return doc

    def close(self) -> None:
        """Closes the calling thread's connection."""
        self._t.close()

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout_s: Optional[float] = None,
        *,
        retry: bool,
    ) -> Tuple[int, Any]:
        """Sends one request; with ``retry``, sends it again after a failure that allows it
        (:mod:`dueq._retry`). The last failure is raised; an answer is returned."""
        policy = self.retry_policy
        tries = policy.retries + 1 if retry else 1
        for attempt in range(tries):
            last = attempt == tries - 1
            try:
                status, parsed = self._t.request(method, path, body, timeout_s)
            except (ConnectionFailedError, TimeoutError_) as e:
                if last:
                    raise
                why = e.code
            else:
                if last or status not in RETRY_STATUSES:
                    return status, parsed
                why = f"{status} {code_of(parsed)}"
            delay_s = policy.delay_s(attempt)
            log.info(
                "dueq: %s %s failed (%s); try %d in %.3f s", method, path, why, attempt + 2, delay_s
            )
            time.sleep(delay_s)
        raise AssertionError("unreachable: the last try returns or raises")

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        ok: Sequence[int] = (200, 201),
        timeout_s: Optional[float] = None,
        *,
        retry: bool,
    ) -> Any:
        status, parsed = self._request(method, path, body, timeout_s, retry=retry)
        if status not in ok:
            raise DueqError.from_response(status, parsed)
        return parsed

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Queue(TaskOps, PullOps, DeadOps, AdminOps, ScheduleOps):
    """Operations on one queue. Cheap; get one from :meth:`Client.queue`.

    The methods by part: producing and looking after tasks (:meth:`enqueue`,
    :meth:`enqueue_batch`, :meth:`get`, :meth:`cancel`, :meth:`reschedule`, :meth:`browse`);
    the pull protocol (:meth:`claim`, :meth:`ack`, :meth:`nack`, :meth:`extend`,
    :meth:`release_batch`); dead letters (:meth:`dead_list`, :meth:`dead_retry`,
    :meth:`dead_delete`, :meth:`dead_retry_matching`, :meth:`dead_delete_matching`); the
    queue (:meth:`stats`, :meth:`pause`, :meth:`resume`, :meth:`purge`, :meth:`delete`,
    :meth:`settings`, :meth:`update_settings`, :meth:`webhook`, :meth:`set_webhook`,
    :meth:`delete_webhook`); schedules (:meth:`schedules`, :meth:`schedule`,
    :meth:`set_schedule`, :meth:`delete_schedule`, :meth:`pause_schedule`,
    :meth:`resume_schedule`, :meth:`trigger_schedule`, :meth:`backfill_schedule`).
    """
