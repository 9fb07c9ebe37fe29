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
import urllib.request
from pathlib import Path

import pytest

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


# --- what the server shows and counts of a Python worker's work ----------------------------
# Each claim names the worker (worker_id = worker.id), so an active task shows who holds it;
# the server counts claims, lateness (claim - due) and run time (ack or nack - claim) in Redis,
# so its /metrics counts the tasks a Python worker ran like a Rust worker's.

KINDS = ["Worker", "AsyncWorker"]


def worker_of(kind: str, queue: dueq.Queue, work, **options):
    """A ``Worker`` or an ``AsyncWorker`` whose handler runs ``work(task)`` (blocking: on a
    thread of the event loop's executor for the ``AsyncWorker``)."""
    options = {"poll_ms": 200, "handle_signals": False, **options}
    if kind == "Worker":
        return Worker(queue.client, queue, work, **options)

    async def handle(task):
        await asyncio.get_running_loop().run_in_executor(None, work, task)

    return AsyncWorker(queue.client, queue, handle, **options)


class Running:
    """Runs a worker of either kind on a thread of its own until :meth:`stop`."""

    def __init__(self, w) -> None:
        self.w = w
        self.out: list = []
        run = (lambda: asyncio.run(w.run())) if isinstance(w, AsyncWorker) else w.run
        self.t = threading.Thread(target=lambda: self.out.append(run()), daemon=True)
        self.t.start()

    def stop(self) -> dueq.WorkerStats:
        self.w.stop()
        self.t.join(30)
        assert not self.t.is_alive() and self.out, "the worker did not stop in 30 s"
        return self.out[0]


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: -?\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(server) -> str:
    req = urllib.request.Request(server.url + "/metrics",
                                 headers={"Authorization": f"Bearer {server.token}"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=20) as r:
        return r.read().decode()


def metric(text: str, name: str, **labels: str) -> float:
    """The value of the one sample of ``name`` whose labels are exactly ``labels``."""
    found = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None or m.group(1) != name:
            continue
        if dict(_LABEL.findall(m.group(2) or "")) == labels:
            found.append(float(m.group(3)))
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples in /metrics"
    return found[0]


@pytest.mark.parametrize("kind", KINDS)
def test_metrics_count_a_python_workers_claims_lateness_and_run_time(
    server, queue: dueq.Queue, kind: str
) -> None:
    n = 12
    queue.enqueue_batch([{"payload": i} for i in range(n)])
    w = worker_of(kind, queue, lambda task: time.sleep(0.02), concurrency=4, claim_max=5)
    r = Running(w)
    try:
        wait_until(lambda: w.stats.acked == n, what=f"{n} acked")
    finally:
        stats = r.stop()
    # the worker alone took each task once
    assert (stats.claimed, stats.acked, stats.lease_lost, stats.released) == (n, n, 0, 0), stats
    text = scrape(server)
    q = queue.name
    assert metric(text, "dueq_tasks_claimed_total", queue=q) == n
    assert metric(text, "dueq_task_lateness_seconds_count", queue=q) == n
    assert metric(text, "dueq_task_lateness_seconds_bucket", queue=q, le="+Inf") == n
    assert metric(text, "dueq_task_duration_seconds_count", queue=q) == n
    assert metric(text, "dueq_task_duration_seconds_bucket", queue=q, le="+Inf") == n
    # each ran its handler's 20 ms between its claim and its ack
    assert metric(text, "dueq_task_duration_seconds_sum", queue=q) >= n * 0.02
    assert metric(text, "dueq_tasks_finished_total", queue=q, outcome="succeeded") == n


@pytest.mark.parametrize("kind", KINDS)
def test_a_running_task_names_the_python_worker_holding_it(queue: dueq.Queue, kind: str) -> None:
    e = queue.enqueue("held")
    started, gate = threading.Event(), threading.Event()

    def work(task) -> None:
        started.set()
        gate.wait(20)

    w = worker_of(kind, queue, work)
    r = Running(w)
    try:
        assert started.wait(10), "the handler did not start in 10 s"
        t = queue.get(e.id)
        assert t is not None and t.state == "active", t
        assert t.worker_id == w.id
        assert t.claimed_at_ms is not None and t.due_at_ms <= t.claimed_at_ms, t
        gate.set()
        wait_until(lambda: w.stats.acked == 1, what="acked")
    finally:
        gate.set()
        stats = r.stop()
    assert (stats.acked, stats.lease_lost) == (1, 0)
    assert queue.get(e.id) is None


def test_worker_ids_fit_a_claim(client: dueq.Client, monkeypatch) -> None:
    # a claim's worker_id is at most 200 bytes, like a registry id
    monkeypatch.setattr(socket, "gethostname", lambda: "h" * 300)
    for w in (Worker(client, "q", lambda t: None), AsyncWorker(client, "q", lambda t: None)):
        assert len(w.id.encode()) <= 200 and w.id.startswith("h" * 100 + ":"), w.id
