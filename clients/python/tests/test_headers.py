"""Task headers: given at enqueue (one, batch, a schedule's task template), returned by get,
browse, the dead-letter list and claim; the server's limits answered with 400."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Dict, List

import pytest

import dueq
from conftest import wait_until
from dueq import InvalidInputError, TaskSpec


def test_headers_round_trip_through_get_and_claim(queue: dueq.Queue) -> None:
    e = queue.enqueue({"order": 42}, key="order:42", headers={"X-Tenant": "acme", "a.b_c-d": "v 1"})
    plain = queue.enqueue("no headers")
    t = queue.get(e.id)
    # names are stored lower-case
    want = {"x-tenant": "acme", "a.b_c-d": "v 1"}
    assert t is not None and t.headers == want
    by_key = queue.get(key="order:42")
    assert by_key is not None and by_key.headers == want
    [listed, _] = queue.browse().tasks
    assert listed.headers == want
    p = queue.get(plain.id)
    assert p is not None and p.headers == {}
    claimed = {c.id: c for c in queue.claim(max=10)}
    assert claimed[e.id].headers == want and claimed[plain.id].headers == {}
    # due at once, first attempt: the run continues the producer's trace
    assert claimed[e.id].continues_trace is True
    # kept into the dead-letter queue
    queue.nack(claimed[e.id], "gone", permanent=True)
    [dead] = queue.dead_list().tasks
    assert dead.task.headers == want


def test_batch_headers(queue: dueq.Queue) -> None:
    out = queue.enqueue_batch(
        [
            TaskSpec(1, headers={"k": "spec"}),
            {"payload": 2, "headers": {"k": "dict"}},
            TaskSpec(3),
        ]
    )
    ids = [x.id for x in out if isinstance(x, dueq.Enqueued)]
    assert len(ids) == 3
    claimed = {c.id: c.headers for c in queue.claim(max=10)}
    assert [claimed[i] for i in ids] == [{"k": "spec"}, {"k": "dict"}, {}]


def test_schedule_template_headers(queue: dueq.Queue) -> None:
    queue.set_schedule("tick", every_ms=1000, payload="tick", headers={"Source": "cron"})
    [c] = queue.claim(wait_ms=5000)
    # a tick's task starts a trace of its own
    assert c.key is not None and c.key.startswith("schedule:tick:")
    assert (c.headers, c.continues_trace) == ({"source": "cron"}, False)
    trig = queue.trigger_schedule("tick")
    queue.delete_schedule("tick")
    t = queue.get(trig.id)
    assert t is not None and t.headers == {"source": "cron"}


def test_a_delayed_task_starts_a_new_trace(queue: dueq.Queue) -> None:
    queue.enqueue("later", delay_ms=1000)
    [c] = queue.claim(wait_ms=5000)
    assert c.continues_trace is False


def test_too_many_headers_are_refused(queue: dueq.Queue) -> None:
    headers = {f"h{i}": "v" for i in range(33)}
    with pytest.raises(InvalidInputError) as e:
        queue.enqueue("x", key="too-many", headers=headers)
    assert "headers" in e.value.message
    with pytest.raises(InvalidInputError) as e:
        queue.enqueue_batch([TaskSpec("ok"), TaskSpec("x", headers=headers)])
    assert "headers" in e.value.message
    with pytest.raises(InvalidInputError) as e:
        queue.set_schedule("s", every_ms=60_000, headers=headers)
    assert "headers" in e.value.message
    # nothing was written
    assert queue.get(key="too-many") is None and queue.stats() is None
    assert queue.schedule("s") is None
    # 32 are fine
    del headers["h32"]
    e2 = queue.enqueue("x", headers=headers)
    t = queue.get(e2.id)
    assert t is not None and t.headers == headers


def test_a_push_delivery_carries_the_trace_context(queue: dueq.Queue) -> None:
    got: List[Dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            got.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    receiver = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        queue.set_webhook(f"http://127.0.0.1:{receiver.server_port}/hook")
        tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        queue.enqueue({"order": 42}, headers={"traceparent": tp, "tracestate": "congo=t61rcWkgMzE"})
        wait_until(lambda: got, what="the delivery")
        assert (got[0].get("traceparent"), got[0].get("tracestate")) == (tp, "congo=t61rcWkgMzE")
    finally:
        receiver.shutdown()
