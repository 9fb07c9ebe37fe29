"""The threaded and asyncio workers against a live server."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import dueq
from dueq import AsyncWorker, Fail, Retry, Worker

from conftest import wait_until


def in_thread(w) -> threading.Thread:
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    return t


def test_worker_runs_acks_nacks_and_keeps_the_concurrency_limit(queue: dueq.Queue) -> None:
    queue.enqueue_batch([{"payload": {"n": i}} for i in range(40)])
    queue.enqueue("raise", max_attempts=3)
    queue.enqueue("retry")
    queue.enqueue("fail")
    lock = threading.Lock()
    running, peak, seen = [0], [0], []

    def handle(task: dueq.ClaimedTask):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            seen.append(task.payload)
        try:
            time.sleep(0.01)  # some work, so that handlers overlap
            if task.payload == "raise":
                raise ValueError("no such order")
            if task.payload == "retry":
                return Retry(in_ms=3_600_000, error="later")
            if task.payload == "fail":
                return Fail("refunded")
            return None
        finally:
            with lock:
                running[0] -= 1

    w = Worker(queue.client, queue, handle, concurrency=4, claim_max=10, poll_ms=200, handle_signals=False)
    t = in_thread(w)
    try:
        wait_until(lambda: w.stats.acked == 40 and w.stats.dead == 1 and w.stats.retried >= 2,
                   what="all answered")  # fmt: skip
    finally:
        w.stop()
        t.join(30)
    assert not t.is_alive()
    assert peak[0] <= 4 and peak[0] >= 2, peak
    assert w.stats.lease_lost == 0
    s = queue.stats()
    assert s is not None and s.succeeded_total == 40 and s.dead == 1 and s.active == 0
    page = queue.dead_list()
    assert page.tasks[0].task.last_error == "refunded"
    # the DLQ shows the attempts made against the attempts allowed (the queue's default, 5)
    assert (page.tasks[0].task.attempt, page.tasks[0].task.max_attempts) == (1, 5)


def test_a_handler_exception_is_the_last_error(queue: dueq.Queue) -> None:
    e = queue.enqueue("x", max_attempts=5)

    def handle(task):
        raise KeyError("order 42")

    w = Worker(queue.client, queue, handle, poll_ms=200, handle_signals=False)
    t = in_thread(w)
    try:
        task = wait_until(lambda: (lambda g: g if g and g.last_error else None)(queue.get(e.id)))
    finally:
        w.stop()
        t.join(30)
    assert task.last_error.startswith("KeyError: 'order 42' (at ")
    assert "in handle" in task.last_error


def test_long_handlers_keep_their_lease(queue: dueq.Queue) -> None:
    e = queue.enqueue("slow")
    done = threading.Event()

    def handle(task):
        # the handler's own work outlasts its 1 s lease three times over
        time.sleep(3)
        done.set()

    w = Worker(queue.client, queue, handle, lease_ms=1000, poll_ms=200, handle_signals=False)
    t = in_thread(w)
    try:
        wait_until(lambda: w.stats.acked == 1, timeout_s=15, what="ack")
    finally:
        w.stop()
        t.join(30)
    assert w.stats.lease_lost == 0 and w.stats.claimed == 1
    assert queue.get(e.id) is None


def test_stop_hands_back_what_did_not_run(queue: dueq.Queue) -> None:
    queue.enqueue_batch([{"payload": i} for i in range(3)])
    gate = threading.Event()
    started = []

    def handle(task):
        started.append(task.id)
        gate.wait(20)

    w = Worker(queue.client, queue, handle, concurrency=3, claim_max=3, poll_ms=200,
               grace_s=0.5, handle_signals=False)  # fmt: skip
    t = in_thread(w)
    wait_until(lambda: len(started) == 3, what="3 handlers running")
    w.stop()
    t.join(30)
    gate.set()
    assert not t.is_alive()
    # the three were still running after the grace period: handed back, attempt not counted
    assert w.stats.released == 3 and w.stats.acked == 0
    again = queue.claim(max=10)
    assert sorted(x.id for x in again) == sorted(started)
    assert {x.attempt for x in again} == {1}


WORKER_SCRIPT = r"""
import sys, threading
sys.path.insert(0, sys.argv[1])
import dueq
client = dueq.Client(sys.argv[2], token=sys.argv[3])
gate = threading.Event()
def handle(task):
    print("started", task.id, flush=True)
    gate.wait(60)
w = dueq.Worker(client, sys.argv[4], handle, concurrency=1, claim_max=1, poll_ms=200, grace_s=0.2)
stats = w.run()
print("stopped", stats.released, flush=True)
"""


def test_sigterm_stops_gracefully(server, queue: dueq.Queue) -> None:
    e = queue.enqueue("held")
    src = str(Path(dueq.__file__).resolve().parents[1])
    p = subprocess.Popen(
        [sys.executable, "-c", WORKER_SCRIPT, src, server.url, server.token, queue.name],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.split() == ["started", e.id], line
        client = queue.client
        wait_until(lambda: [w for w in client.workers(queue.name) if w.pid == p.pid],
                   what="the worker process listed")  # fmt: skip
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0
    assert out.split() == ["stopped", "1"], out
    # it left the live workers list on its way out
    assert client.workers(queue.name) == []
    t = queue.get(e.id)
    assert t is not None and t.state == "scheduled" and t.attempt == 0


def test_async_worker(queue: dueq.Queue) -> None:
    queue.enqueue_batch([{"payload": i} for i in range(30)])
    queue.enqueue("boom")
    peak, running = [0], [0]

    async def handle(task):
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        try:
            await asyncio.sleep(0.01)
            if task.payload == "boom":
                return Retry(in_ms=3_600_000, error="later")
        finally:
            running[0] -= 1

    async def main():
        w = AsyncWorker(queue.client, queue, handle, concurrency=5, claim_max=10, poll_ms=200)
        run = asyncio.ensure_future(w.run())
        deadline = time.monotonic() + 10
        while not (w.stats.acked == 30 and w.stats.retried == 1):
            assert time.monotonic() < deadline, w.stats
            await asyncio.sleep(0.02)
        w.stop()
        return await asyncio.wait_for(run, 30)

    stats = asyncio.run(main())
    assert stats.lease_lost == 0 and 2 <= peak[0] <= 5, (stats, peak)
    s = queue.stats()
    assert s is not None and s.succeeded_total == 30 and s.scheduled == 1


def test_async_worker_stop_releases_running_tasks(queue: dueq.Queue) -> None:
    e = queue.enqueue("held")
    started = []

    async def handle(task):
        started.append(task.id)
        await asyncio.sleep(60)

    async def main():
        w = AsyncWorker(queue.client, queue, handle, poll_ms=200, grace_s=0.2, handle_signals=False)
        run = asyncio.ensure_future(w.run())
        deadline = time.monotonic() + 10
        while not started:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        w.stop()
        return await asyncio.wait_for(run, 30)

    stats = asyncio.run(main())
    assert stats.released == 1
    t = queue.get(e.id)
    assert t is not None and t.state == "scheduled" and t.attempt == 0


def test_prefetch_claims_ahead_but_runs_at_most_concurrency(queue: dueq.Queue) -> None:
    queue.enqueue_batch([{"payload": i} for i in range(60)])
    lock = threading.Lock()
    running, peak = [0], [0]

    def handle(task):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.002)
        with lock:
            running[0] -= 1

    w = Worker(queue.client, queue, handle, concurrency=2, prefetch=20, claim_max=20,
               poll_ms=200, handle_signals=False)  # fmt: skip
    t = in_thread(w)
    try:
        wait_until(lambda: w.stats.acked == 60, what="60 acked")
    finally:
        w.stop()
        t.join(30)
    assert 1 <= peak[0] <= 2, peak
    # more was claimed at once than there are threads (claims of up to 20)
    assert w.stats.claimed == 60 and w.stats.lease_lost == 0


# --- the live workers list (heartbeat) -----------------------------------------------------


def listed(client: dueq.Client, wid: str):
    """The worker's entry in ``GET /v1/workers``, or ``None``."""
    return next((w for w in client.workers() if w.id == wid), None)


def in_hand_is(client: dueq.Client, wid: str, n: int):
    return lambda: (lambda w: w if w is not None and w.in_hand == n else None)(listed(client, wid))


def check_entry(w, queue: dueq.Queue, concurrency: int, heartbeat_ms: int) -> None:
    assert (w.kind, w.language, w.queues, w.concurrency) == (
        "worker", "python", [queue.name], concurrency,
    )  # fmt: skip
    assert (w.host, w.pid, w.version) == (socket.gethostname(), os.getpid(), dueq.__version__)
    # listed for 3 beats after the last one
    assert w.expires_at_ms - w.last_seen_ms == 3 * heartbeat_ms


def test_worker_is_listed_while_it_runs_and_leaves_at_stop(queue: dueq.Queue) -> None:
    client = queue.client
    gate = threading.Event()
    started = []

    def handle(task):
        started.append(task.id)
        gate.wait(20)

    w = Worker(client, queue, handle, concurrency=3, poll_ms=200, heartbeat_ms=100,
               handle_signals=False)  # fmt: skip
    assert re.fullmatch(r"[!-~]+:%d:[0-9a-f]{8}" % os.getpid(), w.id), w.id
    assert listed(client, w.id) is None  # registered by run(), not before
    t = in_thread(w)
    try:
        first = wait_until(lambda: listed(client, w.id), what="the worker listed")
        check_entry(first, queue, 3, 100)
        assert [x.id for x in client.workers(queue.name)] == [w.id]
        queue.enqueue_batch([{"payload": i} for i in range(2)])
        wait_until(lambda: len(started) == 2, what="2 handlers running")
        wait_until(in_hand_is(client, w.id, 2), what="in_hand 2 at a beat")
        gate.set()
        wait_until(lambda: w.stats.acked == 2, what="2 acked")
        wait_until(in_hand_is(client, w.id, 0), what="in_hand 0 at a beat")
    finally:
        gate.set()
        w.stop()
        t.join(30)
    assert not t.is_alive()
    # gone as soon as run() returned, not 3 beats later
    assert listed(client, w.id) is None


def test_async_worker_is_listed_while_it_runs_and_leaves_at_stop(queue: dueq.Queue) -> None:
    client = queue.client
    gate = threading.Event()
    started = []

    async def handle(task):
        started.append(task.id)
        while not gate.is_set():
            await asyncio.sleep(0.01)

    w = AsyncWorker(client, queue, handle, concurrency=5, poll_ms=200, heartbeat_ms=100,
                    handle_signals=False)  # fmt: skip
    out = []
    t = threading.Thread(target=lambda: out.append(asyncio.run(w.run())), daemon=True)
    t.start()
    try:
        first = wait_until(lambda: listed(client, w.id), what="the worker listed")
        check_entry(first, queue, 5, 100)
        queue.enqueue_batch([{"payload": i} for i in range(3)])
        wait_until(lambda: len(started) == 3, what="3 handlers running")
        wait_until(in_hand_is(client, w.id, 3), what="in_hand 3 at a beat")
        gate.set()
        wait_until(lambda: w.stats.acked == 3, what="3 acked")
        wait_until(in_hand_is(client, w.id, 0), what="in_hand 0 at a beat")
    finally:
        gate.set()
        w.stop()
        t.join(30)
    assert not t.is_alive() and out and out[0].acked == 3
    assert listed(client, w.id) is None


class FlakyBeats(dueq.Client):
    """A client whose first ``fail`` heartbeats fail."""

    def __init__(self, *args, fail: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fail = fail
        self.beats = 0

    def beat_worker(self, *args, **kwargs) -> bool:
        self.beats += 1
        if self.beats <= self.fail:
            raise dueq.DueqError(503, "redis_unavailable", "injected")
        return super().beat_worker(*args, **kwargs)


def test_a_failed_beat_is_logged_and_retried(server, queue: dueq.Queue, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="dueq.worker")
    flaky = FlakyBeats(server.url, token=server.token, timeout_s=20, fail=2)
    q = flaky.queue(queue.name)
    w = Worker(flaky, q, lambda task: None, poll_ms=200, heartbeat_ms=100, handle_signals=False)
    t = in_thread(w)
    try:
        # the worker works meanwhile, and the third beat lists it
        q.enqueue("x")
        wait_until(lambda: w.stats.acked == 1, what="ack")
        wait_until(lambda: listed(flaky, w.id), what="listed after 2 failed beats")
    finally:
        w.stop()
        t.join(30)
    assert not t.is_alive()
    failed = [r for r in caplog.records if "heartbeat of worker" in r.getMessage()]
    assert len(failed) == 2, [r.getMessage() for r in caplog.records]
    assert w.id in failed[0].getMessage() and "injected" in failed[0].getMessage()
    assert listed(flaky, w.id) is None


def test_heartbeat_ms_is_checked(client: dueq.Client) -> None:
    import pytest

    for bad in (99, 60_001):
        with pytest.raises(ValueError, match="heartbeat_ms"):
            Worker(client, "q", lambda t: None, heartbeat_ms=bad)
        with pytest.raises(ValueError, match="heartbeat_ms"):
            AsyncWorker(client, "q", lambda t: None, heartbeat_ms=bad)  # type: ignore[arg-type,return-value]
    assert Worker(client, "q", lambda t: None).heartbeat_ms == 5000
    ids = {Worker(client, "q", lambda t: None).id for _ in range(3)}
    assert len(ids) == 3
