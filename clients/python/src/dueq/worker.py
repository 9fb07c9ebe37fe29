"""``Worker``: runs a handler for every task of a queue, on threads.

Duties, one thread each (the handler pool has ``concurrency`` threads):

* claimer (the thread that calls :meth:`Worker.run`): long-polls ``POST .../claim`` for up
  to as many tasks as there are free handler slots, at most ``claim_max``, naming the worker
  (``worker_id``: its :attr:`Worker.id`); while tasks are in hand it waits for half a batch
  of free slots, so claims stay batched under load;
* handlers: run the handler and turn its answer into an ack or a nack (see
  :mod:`dueq.outcome`); with OpenTelemetry installed, each call runs in a consumer span
  (:mod:`dueq._tracing`);
* acker: sends what the handlers reported in batches (``/acks``, ``/nacks``): it takes
  everything reported since its last request, so batches grow with the load and a lone task
  is acknowledged at once;
* lease keeper: extends the lease of a task whose handler has run for a third of
  ``lease_ms``, so long handlers keep their tasks;
* heartbeat (:mod:`dueq._heartbeat`): registers the worker in the server's live workers
  list when :meth:`Worker.run` starts and beats every ``heartbeat_ms`` with the handlers
  running at that moment.

Shutdown order (:meth:`Worker.stop`, SIGTERM or SIGINT while :meth:`Worker.run` runs on the
main thread):

1. the claimer finishes the long-poll in flight (at most ``poll_ms``) and claims no more;
2. claimed tasks no handler has started are handed back (``/releases``: due again at once,
   the attempt not counted);
3. running handlers get ``grace_s`` to finish; their outcomes are sent;
4. the leases of handlers still running then are handed back the same way (the handler
   threads are daemons; what they report later is dropped);
5. the acker sends what is left, the lease keeper stops;
6. the heartbeat stops and the worker leaves the live workers list (its last call); ``run``
   returns the counts.
"""

from __future__ import annotations

import logging
import queue as _queue
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Union

from . import _tracing
from ._heartbeat import DEFAULT_HEARTBEAT_MS, Heartbeat, new_worker_id, validate_heartbeat_ms
from .client import Client, Queue
from .errors import DueqError
from .models import AckOutcome, ClaimedTask, NackOutcome, ReleaseOutcome
from .outcome import Verdict, failure, verdict

__all__ = ["Worker", "WorkerStats"]

log = logging.getLogger("dueq.worker")

Handler = Callable[[ClaimedTask], Any]


@dataclass
class WorkerStats:
    """What a worker did."""

    claimed: int = 0
    acked: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0
    lease_lost: int = 0
    """Answers refused because the lease was no longer current (the task ran too long, or
    another worker took it over); those tasks run again elsewhere."""


class _Held:
    __slots__ = ("task", "extended_at", "started")

    def __init__(self, task: ClaimedTask, now: float) -> None:
        self.task = task
        self.extended_at = now
        self.started = False


class Worker:
    """Runs ``handler(task)`` for the tasks of ``queue``, at most ``concurrency`` at once.

    * ``claim_max``: most tasks per claim (1 to 1000, default 100);
    * ``poll_ms``: how long one claim waits for work (default 5000; also the longest wait
      for :meth:`stop` to take effect);
    * ``lease_ms``: the lease asked for each claim (default 30000); handlers running longer
      than a third of it get it extended;
    * ``grace_s``: how long :meth:`stop` lets running handlers finish (default 30);
    * ``prefetch``: tasks claimed ahead of free handler threads (default 0). Fast handlers
      run at a fraction of the per-task cost with ``prefetch`` of about ``claim_max``
      (threads then take the next task without being woken); slow handlers should keep 0,
      since prefetched tasks wait in this process while other workers may be idle;
    * ``handle_signals``: :meth:`run` on the main thread stops on SIGTERM and SIGINT;
    * ``heartbeat_ms``: time between two beats into the server's live workers list (100 to
      60000, default 5000); the entry expires three beats after the last one. ``id`` is the
      worker's id there (``host:pid:random``); each claim sends it too, so a task this
      worker runs shows it as :attr:`Task.worker_id <dueq.Task.worker_id>`.
    """

    def __init__(
        self,
        client: Client,
        queue: Union[str, Queue],
        handler: Handler,
        *,
        concurrency: int = 8,
        claim_max: int = 100,
        poll_ms: int = 5000,
        lease_ms: int = 30000,
        grace_s: float = 30.0,
        handle_signals: bool = True,
        prefetch: int = 0,
        heartbeat_ms: int = DEFAULT_HEARTBEAT_MS,
    ) -> None:
        validate_heartbeat_ms(heartbeat_ms)
        if prefetch < 0:
            raise ValueError("prefetch must be 0 or more")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 1 <= claim_max <= 1000:
            raise ValueError("claim_max must be 1 to 1000")
        if not 0 <= poll_ms <= 60000:
            raise ValueError("poll_ms must be 0 to 60000")
        if lease_ms < 1:
            raise ValueError("lease_ms must be at least 1")
        self.queue = client.queue(queue) if isinstance(queue, str) else queue
        self.handler = handler
        self.concurrency = concurrency
        self.claim_max = claim_max
        self.poll_ms = poll_ms
        self.lease_ms = lease_ms
        self.grace_s = grace_s
        self.handle_signals = handle_signals
        self.prefetch = prefetch
        self.heartbeat_ms = heartbeat_ms
        self.id = new_worker_id()
        """This worker's id in the live workers list (``GET /v1/workers``)."""
        # tasks in hand at most: running plus claimed ahead
        self._capacity = concurrency + prefetch
        self._low = max(1, min(claim_max, self._capacity) // 2)
        self._claimer_waiting = False
        self.stats = WorkerStats()
        self._stop = threading.Event()
        self._keeper_done = threading.Event()
        self._lock = threading.Condition()
        self._held: Dict[Tuple[str, str], _Held] = {}
        self._abandoned: Set[Tuple[str, str]] = set()
        self._work: "_queue.Queue[Optional[ClaimedTask]]" = _queue.Queue()
        self._results: "_queue.Queue[Optional[Tuple[ClaimedTask, Verdict]]]" = _queue.Queue()

    def stop(self) -> None:
        """Begins the shutdown (see the module docs); safe from any thread and from a signal
        handler. :meth:`run` returns once it is done."""
        # only an Event: a signal handler must not take the worker's lock
        self._stop.set()

    def run(self) -> WorkerStats:
        """Works the queue until :meth:`stop` (or SIGTERM / SIGINT); returns the counts."""
        restore = self._install_signals()
        handlers = [
            threading.Thread(target=self._handle_loop, name=f"dueq-handler-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        acker = threading.Thread(target=self._ack_loop, name="dueq-acker", daemon=True)
        keeper = threading.Thread(target=self._keep_loop, name="dueq-lease-keeper", daemon=True)
        heartbeat = Heartbeat(
            self.queue.client,
            self.id,
            [self.queue.name],
            self.concurrency,
            self._running_handlers,
            self.heartbeat_ms,
        )
        heartbeat.start()
        for t in [*handlers, acker, keeper]:
            t.start()
        try:
            self._claim_loop()
        finally:
            try:
                self._shutdown(handlers, acker, keeper)
            finally:
                heartbeat.close()  # the last call: leaves the live workers list
                for sig, previous in restore:
                    signal.signal(sig, previous)
        return self.stats

    def _running_handlers(self) -> int:
        with self._lock:
            return sum(1 for h in self._held.values() if h.started)

    # --- claimer ---------------------------------------------------------------------------

    def _claim_loop(self) -> None:
        backoff = 0.1
        # claim in batches: while tasks are in hand, wait for half a batch of free slots
        # rather than claiming one task per finished handler
        while not self._stop.is_set():
            with self._lock:
                while (
                    self._held
                    and self._capacity - len(self._held) < self._low
                    and not self._stop.is_set()
                ):
                    self._claimer_waiting = True
                    self._lock.wait(0.2)
                self._claimer_waiting = False
                free = self._capacity - len(self._held)
            if self._stop.is_set():
                break
            try:
                tasks = self.queue.claim(
                    min(free, self.claim_max), self.poll_ms, self.lease_ms, worker_id=self.id
                )
                backoff = 0.1
            except DueqError as e:
                log.warning("dueq: claim on %s failed: %s", self.queue.name, e)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            now = time.monotonic()
            with self._lock:
                for t in tasks:
                    self._held[(t.id, t.lease_token)] = _Held(t, now)
                self.stats.claimed += len(tasks)
            if self._stop.is_set():
                self._release(tasks)
                break
            for t in tasks:
                self._work.put(t)

    # --- handlers --------------------------------------------------------------------------

    def _handle_loop(self) -> None:
        while True:
            task = self._work.get()
            if task is None:
                return
            key = (task.id, task.lease_token)
            with self._lock:
                h = self._held.get(key)
                if h is None:  # released by the shutdown meanwhile
                    continue
                h.started = True
            with _tracing.start(task, self.lease_ms) as run:
                try:
                    v = verdict(self.handler(task))
                except Exception as e:  # the handler's failure is the task's, not the worker's
                    v = failure(e)
                    run.raised(e)
                run.answered(v)
            with self._lock:
                self._held.pop(key, None)
                abandoned = key in self._abandoned
                # wake the claimer only when a batch's worth is free (a wake-up per task
                # costs a GIL hand-over per task)
                if self._claimer_waiting and self._capacity - len(self._held) >= self._low:
                    self._lock.notify_all()
            if not abandoned:
                self._results.put((task, v))

    # --- acker -----------------------------------------------------------------------------

    def _ack_loop(self) -> None:
        done = False
        while not done:
            first = self._results.get()
            batch: List[Tuple[ClaimedTask, Verdict]] = []
            if first is None:
                done = True
            else:
                batch.append(first)
            while len(batch) < 1000:
                try:
                    item = self._results.get_nowait()
                except _queue.Empty:
                    break
                if item is None:
                    done = True
                    break
                batch.append(item)
            if batch:
                self._send(batch)

    def _send(self, batch: List[Tuple[ClaimedTask, Verdict]]) -> None:
        acks = [t for t, v in batch if v[0] == "ack"]
        nacks = [(t, v[1], v[2], v[3]) for t, v in batch if v[0] == "nack"]
        for attempt in range(3):
            try:
                if acks:
                    again = []
                    for t, o in zip(acks, self.queue.ack_batch(acks)):
                        if o is AckOutcome.ACKED:
                            self.stats.acked += 1
                        elif o is AckOutcome.FAILED:
                            # its partition failed: only this one is sent again
                            again.append(t)
                        else:
                            self.stats.lease_lost += 1
                    acks = again
                if nacks:
                    again_n = []
                    for n, r in zip(nacks, self.queue.nack_batch(nacks)):
                        if r.outcome is NackOutcome.RESCHEDULED:
                            self.stats.retried += 1
                        elif r.outcome is NackOutcome.DEAD:
                            self.stats.dead += 1
                        elif r.outcome is NackOutcome.FAILED:
                            again_n.append(n)
                        else:
                            self.stats.lease_lost += 1
                    nacks = again_n
                if not acks and not nacks:
                    return
                log.warning("dueq: %d answers failed on their partition (try %d)",
                            len(acks) + len(nacks), attempt + 1)
                time.sleep(0.2 * (attempt + 1))
            except DueqError as e:
                # sending again is safe: an answer that did land is refused as lease_lost
                log.warning("dueq: answering %d tasks failed (try %d): %s", len(batch), attempt + 1, e)
                time.sleep(0.2 * (attempt + 1))
        log.error("dueq: gave up answering %d tasks; their leases expire and they run again", len(batch))

    # --- lease keeper ----------------------------------------------------------------------

    def _keep_loop(self) -> None:
        every = self.lease_ms / 3000.0
        # runs through the shutdown's grace period too: handlers finishing then keep their tasks
        while not self._keeper_done.wait(min(every / 2, 1.0)):
            self._extend_due(every)

    def _extend_due(self, every: float) -> None:
        now = time.monotonic()
        with self._lock:
            due = [h for h in self._held.values() if now - h.extended_at >= every]
        # a try that hangs gives up in time for another, on a new connection, before the
        # lease runs out
        timeout_s = max(self.lease_ms / 4000.0, 0.25)
        for h in due:
            try:
                if self.queue.extend(h.task, self.lease_ms, timeout_s=timeout_s) is not None:
                    h.extended_at = time.monotonic()
            except DueqError as e:
                log.warning("dueq: extending the lease of %s failed: %s", h.task.id, e)

    # --- shutdown --------------------------------------------------------------------------

    def _release(self, tasks: List[ClaimedTask]) -> None:
        if not tasks:
            return
        with self._lock:
            for t in tasks:
                self._held.pop((t.id, t.lease_token), None)
                self._abandoned.add((t.id, t.lease_token))
            self._lock.notify_all()
        try:
            for o in self.queue.release_batch(tasks):
                if o is ReleaseOutcome.RELEASED:
                    self.stats.released += 1
                else:
                    self.stats.lease_lost += 1
        except DueqError as e:
            log.warning("dueq: handing back %d leases failed (they expire instead): %s", len(tasks), e)

    def _shutdown(
        self, handlers: List[threading.Thread], acker: threading.Thread, keeper: threading.Thread
    ) -> None:
        self._stop.set()
        with self._lock:
            waiting = [h.task for h in self._held.values() if not h.started]
        self._release(waiting)
        for _ in handlers:
            self._work.put(None)
        deadline = time.monotonic() + self.grace_s
        for t in handlers:
            t.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            stuck = [h.task for h in self._held.values()]
        self._release(stuck)
        self._keeper_done.set()
        self._results.put(None)
        acker.join()
        keeper.join()

    def _install_signals(self) -> List[Tuple[int, Any]]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return []
        restore: List[Tuple[int, Any]] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            restore.append((sig, signal.getsignal(sig)))
            signal.signal(sig, lambda *_: self.stop())
        return restore
