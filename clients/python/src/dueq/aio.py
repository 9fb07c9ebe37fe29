"""asyncio: ``AsyncClient`` / ``AsyncQueue`` (every call of :class:`dueq.Client` and
:class:`dueq.Queue` as a coroutine, :mod:`dueq._aclient`) and ``AsyncWorker``, the
:class:`dueq.Worker` for ``async def`` handlers.

Handlers run as tasks on the event loop, at most ``concurrency`` at once. The standard
library has no asynchronous HTTP client, so the requests (claim, acks, nacks, extend,
releases) run on a few threads of their own (``loop.run_in_executor``), each with its
keep-alive connection; the event loop never blocks on the network.

Duties and shutdown order are those of :mod:`dueq.worker`: the claim in flight finishes
(at most ``poll_ms``) and no more are made; claimed tasks not started are handed back
(``/releases``); running handlers get ``grace_s`` to finish, then are cancelled and their
leases handed back; the remaining answers are sent; last, the worker leaves the live
workers list. Its heartbeat (:mod:`dueq._heartbeat`, every ``heartbeat_ms``) runs on a
thread of its own, so a busy event loop never delays a beat.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import signal
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Set, Tuple, Union

from . import _tracing
from ._aclient import AsyncClient, AsyncQueue, AsyncTestClock
from ._heartbeat import DEFAULT_HEARTBEAT_MS, Heartbeat, new_worker_id, validate_heartbeat_ms
from .client import Client, Queue
from .errors import DueqError
from .models import AckOutcome, ClaimedTask, NackOutcome, ReleaseOutcome
from .outcome import Verdict, failure, verdict
from .worker import WorkerStats

__all__ = ["AsyncClient", "AsyncQueue", "AsyncTestClock", "AsyncWorker"]

log = logging.getLogger("dueq.worker")

AsyncHandler = Callable[[ClaimedTask], Awaitable[Any]]


class AsyncWorker:
    """Runs ``await handler(task)`` for the tasks of ``queue``, at most ``concurrency`` at
    once. Options as for :class:`dueq.Worker`; ``handle_signals`` installs SIGTERM and SIGINT
    handlers on the running loop (Unix) for the time :meth:`run` runs. ``id`` is the worker's
    id in the live workers list (``GET /v1/workers``), where it beats every ``heartbeat_ms``
    (100 to 60000, default 5000), and the ``worker_id`` of its claims. ``client`` may be a
    :class:`Client` or an :class:`AsyncClient`. With OpenTelemetry installed, each handler
    call runs in a consumer span, as in :class:`dueq.Worker`."""

    def __init__(
        self,
        client: Union[Client, AsyncClient],
        queue: Union[str, Queue, AsyncQueue],
        handler: AsyncHandler,
        *,
        concurrency: int = 64,
        claim_max: int = 100,
        poll_ms: int = 5000,
        lease_ms: int = 30000,
        grace_s: float = 30.0,
        handle_signals: bool = True,
        heartbeat_ms: int = DEFAULT_HEARTBEAT_MS,
    ) -> None:
        validate_heartbeat_ms(heartbeat_ms)
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 1 <= claim_max <= 1000:
            raise ValueError("claim_max must be 1 to 1000")
        if not 0 <= poll_ms <= 60000:
            raise ValueError("poll_ms must be 0 to 60000")
        if isinstance(client, AsyncClient):
            client = client.sync
        if isinstance(queue, AsyncQueue):
            queue = queue.sync
        self.queue = client.queue(queue) if isinstance(queue, str) else queue
        self.handler = handler
        self.concurrency = concurrency
        self.claim_max = claim_max
        self.poll_ms = poll_ms
        self.lease_ms = lease_ms
        self.grace_s = grace_s
        self.handle_signals = handle_signals
        self.heartbeat_ms = heartbeat_ms
        self.id = new_worker_id()
        """This worker's id in the live workers list."""
        self.stats = WorkerStats()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop: Optional[asyncio.Event] = None
        self._stop_requested = False
        # running handler tasks by (id, lease_token), with the local time of the last extension
        self._running: Dict[Tuple[str, str], Tuple[ClaimedTask, "asyncio.Task[None]", float]] = {}
        self._abandoned: Set[Tuple[str, str]] = set()
        self._pending: List[Tuple[ClaimedTask, Verdict]] = []
        self._reported: Optional[asyncio.Event] = None
        self._closing = False
        self._freed: Optional[asyncio.Event] = None
        self._pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="dueq-http")

    def stop(self) -> None:
        """Begins the shutdown; safe from any thread."""
        self._stop_requested = True
        loop, ev = self._loop, self._stop
        if loop is not None and ev is not None:
            loop.call_soon_threadsafe(ev.set)

    async def _io(self, fn: Callable[..., Any], *args: Any) -> Any:
        assert self._loop is not None
        return await self._loop.run_in_executor(self._pool, fn, *args)

    async def run(self) -> WorkerStats:
        """Works the queue until :meth:`stop` (or SIGTERM / SIGINT); returns the counts."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._reported = asyncio.Event()
        self._freed = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        installed: List[int] = []
        if self.handle_signals:
            for sig in (int(signal.SIGTERM), int(signal.SIGINT)):
                try:
                    self._loop.add_signal_handler(sig, self._stop.set)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError, ValueError):
                    pass  # not the main thread, or not Unix: stop() only
        # len() of a dict read from the heartbeat's thread: one atomic read
        heartbeat = Heartbeat(
            self.queue.client,
            self.id,
            [self.queue.name],
            self.concurrency,
            lambda: len(self._running),
            self.heartbeat_ms,
        )
        heartbeat.start()
        acker = asyncio.ensure_future(self._ack_loop())
        keeper = asyncio.ensure_future(self._keep_loop())
        try:
            await self._claim_loop()
        finally:
            try:
                await self._shutdown(acker, keeper)
            finally:
                # the last call: leaves the live workers list (joined off the event loop)
                await self._io(heartbeat.close)
                for sig in installed:
                    self._loop.remove_signal_handler(sig)
                self._pool.shutdown(wait=False)
        return self.stats

    async def _claim_loop(self) -> None:
        assert self._stop is not None and self._freed is not None
        backoff = 0.1
        low = max(1, min(self.claim_max, self.concurrency) // 2)  # see dueq.worker
        while not self._stop.is_set():
            free = self.concurrency - len(self._running)
            if self._running and free < low:
                self._freed.clear()
                await _first(self._freed.wait(), self._stop.wait())
                continue
            try:
                tasks = await self._io(
                    functools.partial(self.queue.claim, worker_id=self.id),
                    min(free, self.claim_max),
                    self.poll_ms,
                    self.lease_ms,
                )
                backoff = 0.1
            except DueqError as e:
                log.warning("dueq: claim on %s failed: %s", self.queue.name, e)
                await _first(asyncio.sleep(backoff), self._stop.wait())
                backoff = min(backoff * 2, 5.0)
                continue
            self.stats.claimed += len(tasks)
            if self._stop.is_set():
                await self._release(tasks)
                return
            now = time.monotonic()
            for t in tasks:
                job = asyncio.ensure_future(self._run_one(t))
                self._running[(t.id, t.lease_token)] = (t, job, now)

    async def _run_one(self, task: ClaimedTask) -> None:
        assert self._reported is not None and self._freed is not None
        key = (task.id, task.lease_token)
        try:
            # a cancelled handler (shutdown) leaves its span without an outcome
            with _tracing.start(task, self.lease_ms) as run:
                try:
                    v = verdict(await self.handler(task))
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # the handler's failure is the task's, not the worker's
                    v = failure(e)
                    run.raised(e)
                run.answered(v)
        finally:
            self._running.pop(key, None)
            self._freed.set()
        if key not in self._abandoned:
            self._pending.append((task, v))
            self._reported.set()

    async def _ack_loop(self) -> None:
        assert self._reported is not None
        while True:
            await self._reported.wait()
            self._reported.clear()
            while self._pending:
                batch, self._pending = self._pending[:1000], self._pending[1000:]
                await self._send(batch)
            if self._closing:
                return

    async def _send(self, batch: List[Tuple[ClaimedTask, Verdict]]) -> None:
        acks = [t for t, v in batch if v[0] == "ack"]
        nacks = [(t, v[1], v[2], v[3]) for t, v in batch if v[0] == "nack"]
        for attempt in range(3):
            try:
                if acks:
                    for o in await self._io(self.queue.ack_batch, acks):
                        if o is AckOutcome.ACKED:
                            self.stats.acked += 1
                        else:
                            self.stats.lease_lost += 1
                    acks = []
                if nacks:
                    for r in await self._io(self.queue.nack_batch, nacks):
                        if r.outcome is NackOutcome.RESCHEDULED:
                            self.stats.retried += 1
                        elif r.outcome is NackOutcome.DEAD:
                            self.stats.dead += 1
                        else:
                            self.stats.lease_lost += 1
                    nacks = []
                return
            except DueqError as e:
                log.warning("dueq: answering %d tasks failed (try %d): %s", len(batch), attempt + 1, e)
                await asyncio.sleep(0.2 * (attempt + 1))
        log.error("dueq: gave up answering %d tasks; their leases expire and they run again", len(batch))

    async def _keep_loop(self) -> None:
        every = self.lease_ms / 3000.0
        while True:
            await asyncio.sleep(min(every / 2, 1.0))
            now = time.monotonic()
            for key, (t, job, at) in list(self._running.items()):
                if now - at < every:
                    continue
                # a hung try gives up in time for another before the lease runs out
                extend = functools.partial(
                    self.queue.extend, timeout_s=max(self.lease_ms / 4000.0, 0.25)
                )
                try:
                    if await self._io(extend, t, self.lease_ms) is not None:
                        if key in self._running:
                            self._running[key] = (t, job, time.monotonic())
                except DueqError as e:
                    log.warning("dueq: extending the lease of %s failed: %s", t.id, e)

    async def _release(self, tasks: List[ClaimedTask]) -> None:
        if not tasks:
            return
        for t in tasks:
            self._abandoned.add((t.id, t.lease_token))
        try:
            for o in await self._io(self.queue.release_batch, tasks):
                if o is ReleaseOutcome.RELEASED:
                    self.stats.released += 1
                else:
                    self.stats.lease_lost += 1
        except DueqError as e:
            log.warning("dueq: handing back %d leases failed (they expire instead): %s", len(tasks), e)

    async def _shutdown(self, acker: "asyncio.Future[None]", keeper: "asyncio.Future[None]") -> None:
        assert self._stop is not None
        self._stop.set()
        jobs = [job for _, job, _ in self._running.values()]
        if jobs:
            await asyncio.wait(jobs, timeout=self.grace_s)
        stuck = [(t, job) for t, job, _ in self._running.values()]
        for _, job in stuck:
            job.cancel()
        await self._release([t for t, _ in stuck])
        keeper.cancel()
        # the acker sends what is left, then returns
        assert self._reported is not None
        self._closing = True
        self._reported.set()
        await asyncio.gather(acker, keeper, *[job for _, job in stuck], return_exceptions=True)


async def _first(*aws: Awaitable[Any]) -> None:
    """Waits for the first of ``aws``; cancels the others."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for t in pending:
        t.cancel()
