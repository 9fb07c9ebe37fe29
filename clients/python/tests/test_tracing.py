"""OpenTelemetry: an enqueue carries the caller's trace context; a worker runs each task in a
consumer span, a child of the producer's span for a task due at once, else a new trace linked
to it. Checked with the SDK's in-memory exporter (opentelemetry-sdk, a test-only dependency:
skipped where it is not installed). Without OpenTelemetry the package works as before."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

import dueq  # noqa: E402
from conftest import Server, dueq_binary, wait_until  # noqa: E402
from dueq import AsyncClient, AsyncWorker, Backoff, Fail, TaskSpec, Worker  # noqa: E402

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def tracer() -> Iterator[trace.Tracer]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    # the global provider can be set once per process: this module is its only user
    trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider
    yield provider.get_tracer("dueq-tests")


def traceparent(span: Any) -> str:
    c = span.get_span_context()
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"


def runs_of(queue: dueq.Queue) -> List[ReadableSpan]:
    return [s for s in EXPORTER.get_finished_spans() if s.name == f"process {queue.name}"]


def work(queue: dueq.Queue, handler: Any, spans: int) -> List[ReadableSpan]:
    """Runs a worker on ``queue`` until ``spans`` runs have ended; their spans, in order."""
    w = Worker(queue.client, queue, handler, poll_ms=200, handle_signals=False)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        wait_until(lambda: len(runs_of(queue)) >= spans, what=f"{spans} spans")
    finally:
        w.stop()
        t.join(30)
    return runs_of(queue)


def test_enqueue_carries_the_active_span(tracer: trace.Tracer, queue: dueq.Queue) -> None:
    with tracer.start_as_current_span("produce") as producer:
        e = queue.enqueue("x", headers={"x-a": "1"})
        [b1, b2] = queue.enqueue_batch([TaskSpec("b"), {"payload": "c", "headers": {"k": "v"}}])
        own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        mine = queue.enqueue("y", headers={"TraceParent": own})
        # a 33rd header would be refused: the trace context is left out, the enqueue stands
        full = {f"h{i}": "v" for i in range(32)}
        packed = queue.enqueue("full", headers=full)
    assert isinstance(b1, dueq.Enqueued) and isinstance(b2, dueq.Enqueued)
    for i, extra in ((e.id, {"x-a": "1"}), (b1.id, {}), (b2.id, {"k": "v"})):
        t = queue.get(i)
        assert t is not None and t.headers == {**extra, "traceparent": traceparent(producer)}
    # explicit headers win (in any case); nothing else is added
    t = queue.get(mine.id)
    assert t is not None and t.headers == {"traceparent": own}
    t = queue.get(packed.id)
    assert t is not None and t.headers == full
    # no active span: nothing added
    plain = queue.get(queue.enqueue("z").id)
    assert plain is not None and plain.headers == {}


def test_async_enqueue_carries_the_active_span(tracer: trace.Tracer, server: Server) -> None:
    async def run() -> Dict[str, str]:
        async with AsyncClient(server.url, token=server.token) as c:
            q = c.queue("py-" + uuid.uuid4().hex[:12])
            with tracer.start_as_current_span("produce") as producer:
                e = await q.enqueue("x")
                want = traceparent(producer)
            t = await q.get(e.id)
            await q.delete(force=True)
            assert t is not None
            return {"got": t.headers.get("traceparent", ""), "want": want}

    r = asyncio.run(run())
    assert r["got"] == r["want"]


def test_a_task_due_at_once_runs_in_a_child_of_the_producer(
    tracer: trace.Tracer, queue: dueq.Queue
) -> None:
    with tracer.start_as_current_span("produce") as producer:
        e = queue.enqueue({"n": 1}, key="order:1", group="acme")
    seen: Dict[str, Any] = {}

    def handle(task: dueq.ClaimedTask) -> None:
        seen["task"] = task
        seen["current"] = trace.get_current_span().get_span_context().span_id

    [span] = work(queue, handle, 1)
    task = seen["task"]
    pc = producer.get_span_context()
    assert task.continues_trace is True
    assert span.kind is SpanKind.CONSUMER
    assert span.context is not None and span.parent is not None
    assert span.context.trace_id == pc.trace_id and span.parent.span_id == pc.span_id
    assert list(span.links) == []
    # the handler runs with the span current (its own spans are children)
    assert seen["current"] == span.context.span_id
    assert span.instrumentation_scope is not None and span.instrumentation_scope.name == "dueq"
    # the claim's time: as the server sends it, else the lease deadline less the worker's lease
    claimed_at_ms = task.claimed_at_ms or task.lease_expires_at_ms - 30_000
    assert dict(span.attributes or {}) == {
        "messaging.system": "dueq",
        "messaging.destination.name": queue.name,
        "messaging.operation.type": "process",
        "messaging.message.id": e.id,
        "dueq.task.key": "order:1",
        "dueq.task.group": "acme",
        "dueq.task.attempt": 1,
        "dueq.task.due_at_ms": e.due_at_ms,
        "dueq.task.lateness_ms": max(0, claimed_at_ms - e.due_at_ms),
        "dueq.task.outcome": "succeeded",
    }
    assert span.status.status_code is StatusCode.UNSET


def test_a_delayed_task_starts_a_new_trace_linked_to_the_producer(
    tracer: trace.Tracer, queue: dueq.Queue
) -> None:
    with tracer.start_as_current_span("produce") as producer:
        e = queue.enqueue("later", delay_ms=1000)
    seen: List[dueq.ClaimedTask] = []
    [span] = work(queue, seen.append, 1)
    pc = producer.get_span_context()
    assert seen[0].continues_trace is False
    assert span.parent is None and span.context is not None
    assert span.context.trace_id != pc.trace_id
    [link] = span.links
    assert (link.context.trace_id, link.context.span_id) == (pc.trace_id, pc.span_id)
    attrs = dict(span.attributes or {})
    assert "dueq.task.key" not in attrs and "dueq.task.group" not in attrs
    assert attrs["messaging.message.id"] == e.id and attrs["dueq.task.due_at_ms"] == e.due_at_ms
    assert isinstance(attrs["dueq.task.lateness_ms"], int) and attrs["dueq.task.lateness_ms"] >= 0
    assert attrs["dueq.task.outcome"] == "succeeded"


def test_a_failed_attempt_is_an_error_and_its_retry_a_new_trace(
    tracer: trace.Tracer, queue: dueq.Queue
) -> None:
    queue.update_settings(backoff=Backoff(base_ms=100, factor=1.0, max_ms=100))
    with tracer.start_as_current_span("produce") as producer:
        queue.enqueue("flaky")

    def handle(task: dueq.ClaimedTask) -> None:
        if task.attempt == 1:
            raise ValueError("payment service down")

    first, second = sorted(work(queue, handle, 2), key=lambda s: s.start_time or 0)
    pc = producer.get_span_context()
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description is not None and "payment service down" in first.status.description
    [event] = first.events
    assert event.name == "exception" and event.attributes is not None
    assert event.attributes["exception.type"] == "ValueError"
    assert first.attributes is not None and first.attributes["dueq.task.outcome"] == "retried"
    assert first.parent is not None and first.parent.span_id == pc.span_id
    # the retry: attempt 2, a new trace linked to the producer
    assert second.attributes is not None and second.attributes["dueq.task.attempt"] == 2
    assert second.attributes["dueq.task.outcome"] == "succeeded"
    assert second.parent is None and [lk.context.span_id for lk in second.links] == [pc.span_id]
    assert second.status.status_code is StatusCode.UNSET


def test_the_last_attempt_and_a_permanent_failure_are_dead(
    tracer: trace.Tracer, queue: dueq.Queue
) -> None:
    queue.enqueue("last", max_attempts=1)
    queue.enqueue("fail")

    def handle(task: dueq.ClaimedTask) -> Any:
        if task.payload == "fail":
            return Fail("refunded")
        raise RuntimeError("boom")

    spans = work(queue, handle, 2)
    assert {s.attributes["dueq.task.outcome"] for s in spans if s.attributes} == {"dead"}
    assert all(s.status.status_code is StatusCode.ERROR for s in spans)
    assert sorted(len(s.events) for s in spans) == [0, 1]  # only the exception is an event


def test_the_async_worker_traces_too(tracer: trace.Tracer, queue: dueq.Queue) -> None:
    with tracer.start_as_current_span("produce") as producer:
        queue.enqueue("x")
    inner: List[int] = []

    async def handle(task: dueq.ClaimedTask) -> None:
        await asyncio.sleep(0)
        inner.append(trace.get_current_span().get_span_context().span_id)

    async def main() -> None:
        w = AsyncWorker(queue.client, queue, handle, poll_ms=200, handle_signals=False)
        run = asyncio.ensure_future(w.run())
        for _ in range(500):
            if runs_of(queue):
                break
            await asyncio.sleep(0.02)
        w.stop()
        await run

    asyncio.run(main())
    [span] = runs_of(queue)
    pc = producer.get_span_context()
    assert span.parent is not None and span.parent.span_id == pc.span_id
    assert span.context is not None and inner == [span.context.span_id]
    assert span.attributes is not None and span.attributes["dueq.task.outcome"] == "succeeded"


NO_OTEL_SCRIPT = r"""
import json, sys
sys.modules["opentelemetry"] = None  # any import of it fails, as when it is not installed
sys.path.insert(0, sys.argv[1])
import dueq, dueq._tracing
client = dueq.Client(sys.argv[2], token=sys.argv[3])
q = client.queue(sys.argv[4])
e = q.enqueue({"n": 1}, headers={"k": "v"})
seen = []
def handle(task):
    seen.append(task.headers)
    w.stop()
w = dueq.Worker(client, q, handle, poll_ms=200, handle_signals=False)
stats = w.run()
print(json.dumps({"enabled": dueq._tracing.ENABLED, "seen": seen, "acked": stats.acked,
                  "done": q.get(e.id) is None}))
"""


def test_works_without_opentelemetry(server: Server, queue: dueq.Queue) -> None:
    src = str(Path(dueq.__file__).resolve().parents[1])
    out = subprocess.run(
        [sys.executable, "-c", NO_OTEL_SCRIPT, src, server.url, server.token, queue.name],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"enabled": False, "seen": [{"k": "v"}], "acked": 1, "done": True}


# --- across languages: one trace from a Python producer to the Rust worker, and back --------


def redis_url(server: Server) -> str:
    """The Redis of the session's server (its data directory's ``redis.url``)."""
    return (Path(server.dir.name) / "data" / "redis.url").read_text().splitlines()[0]


def rust_env() -> Dict[str, str]:
    """The environment of a ``dueq`` command, without an OTLP export of its own."""
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


def test_a_python_producer_and_the_rust_worker_share_the_trace(
    tracer: trace.Tracer, server: Server, queue: dueq.Queue, tmp_path: Path
) -> None:
    out = tmp_path / "traceparent.txt"
    worker = subprocess.Popen(
        [str(dueq_binary()), "--redis", redis_url(server), "work", queue.name, "--",
         "sh", "-c", f'printf %s "$TRACEPARENT" > {out}.tmp && mv {out}.tmp {out}'],
        env=rust_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        with tracer.start_as_current_span("checkout") as producer:
            queue.enqueue({"order": 42}, key="order:42:receipt")
        wait_until(out.exists, timeout_s=20, what="the run of `dueq work`")
    finally:
        worker.terminate()
        worker.wait(30)
    # the Rust worker's command runs in the producer's trace, under the producer's span
    assert out.read_text() == traceparent(producer)


def test_a_rust_producer_and_a_python_worker_share_the_trace(
    tracer: trace.Tracer, server: Server, queue: dueq.Queue
) -> None:
    trace_id, span_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    subprocess.run(
        [str(dueq_binary()), "--redis", redis_url(server), "enqueue", queue.name,
         "--payload", "{}"],
        env={**rust_env(), "TRACEPARENT": f"00-{trace_id}-{span_id}-01"}, check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    [span] = work(queue, lambda task: None, 1)
    assert span.context is not None and span.parent is not None
    assert (span.context.trace_id, span.parent.span_id) == (int(trace_id, 16), int(span_id, 16))
