"""Retries: which calls are sent again after a failure, and that a keyed enqueue sent twice
makes one task. The failures come from a small proxy in front of the live server that
forwards each request or, as told, answers 503, drops the connection, or forwards the
request and then never answers (the write is applied, the answer lost)."""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator, List, Tuple

import pytest

import dueq
from conftest import Server
from dueq._retry import RetryPolicy


class FaultProxy:
    """Forwards to ``target``; ``plan`` holds the fate of the next requests in order
    (``forward``, ``503``, ``drop``, ``hang``: forwarded, then no answer); ``seen`` the
    ``(method, path)`` of each request that arrived."""

    def __init__(self, target: str) -> None:
        self.plan: List[str] = []
        self.seen: List[Tuple[str, str]] = []
        self._lock = threading.Lock()
        t = urllib.parse.urlsplit(target)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with proxy._lock:
                    proxy.seen.append((self.command, self.path))
                    fate = proxy.plan.pop(0) if proxy.plan else "forward"
                if fate == "503":
                    self._answer(503, b'{"error":{"code":"redis_unavailable","message":"injected"}}')
                    return
                if fate == "drop":
                    self.close_connection = True
                    return
                fwd = http.client.HTTPConnection(t.hostname, t.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                fwd.request(self.command, self.path, body=body or None, headers=headers)
                res = fwd.getresponse()
                answer = res.read()
                fwd.close()
                if fate == "hang":
                    # applied; the client gives up waiting and closes its end
                    self.connection.settimeout(30)
                    self.rfile.read(1)
                    self.close_connection = True
                    return
                self._answer(res.status, answer)

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def proxy(server: Server) -> Iterator[FaultProxy]:
    p = FaultProxy(server.url)
    try:
        yield p
    finally:
        p.close()


def via(proxy: FaultProxy, server: Server, queue: dueq.Queue, **kw: Any) -> dueq.Queue:
    kw.setdefault("timeout_s", 1.0)
    kw.setdefault("retry_base_ms", 10)
    return dueq.Client(proxy.url, token=server.token, **kw).queue(queue.name)


def posts(proxy: FaultProxy) -> int:
    return sum(1 for m, _ in proxy.seen if m == "POST")


def test_a_keyed_enqueue_whose_answer_was_lost_is_sent_again_and_makes_one_task(
    proxy: FaultProxy, server: Server, queue: dueq.Queue
) -> None:
    proxy.plan = ["hang"]
    e = via(proxy, server, queue).enqueue({"order": 7}, key="order:7:cancel", delay_ms=60_000)
    assert posts(proxy) == 2  # the first try was applied, its answer lost
    assert e.created is False  # the second try found the first one's task
    tasks = queue.browse().tasks
    assert [(t.id, t.key, t.payload) for t in tasks] == [(e.id, "order:7:cancel", {"order": 7})]


def test_a_keyless_enqueue_is_not_sent_again(
    proxy: FaultProxy, server: Server, queue: dueq.Queue
) -> None:
    proxy.plan = ["hang"]
    with pytest.raises(dueq.TimeoutError_):
        via(proxy, server, queue).enqueue({"order": 8}, delay_ms=60_000)
    assert posts(proxy) == 1
    # it was applied: sending it again would have made a second task
    assert [t.payload for t in queue.browse().tasks] == [{"order": 8}]


def test_a_keyed_enqueue_that_replaces_is_not_sent_again(
    proxy: FaultProxy, server: Server, queue: dueq.Queue
) -> None:
    queue.enqueue({"v": 1}, key="order:9", delay_ms=60_000)
    proxy.plan = ["hang"]
    with pytest.raises(dueq.TimeoutError_):
        via(proxy, server, queue).enqueue(
            {"v": 2}, key="order:9", delay_ms=60_000, on_conflict="replace"
        )
    assert posts(proxy) == 1
    assert [t.payload for t in queue.browse().tasks] == [{"v": 2}]


def test_a_keyed_batch_is_retried_and_a_mixed_one_is_not(
    proxy: FaultProxy, server: Server, queue: dueq.Queue
) -> None:
    q = via(proxy, server, queue)
    proxy.plan = ["503"]
    out = q.enqueue_batch([{"payload": 1, "key": "a"}, {"payload": 2, "key": "b"}])
    assert all(isinstance(r, dueq.Enqueued) for r in out) and posts(proxy) == 2
    proxy.plan = ["503"]
    with pytest.raises(dueq.UnavailableError):
        q.enqueue_batch([{"payload": 3, "key": "c"}, {"payload": 4}])
    assert posts(proxy) == 3


def test_reads_are_retried_after_503_and_a_dropped_connection(
    proxy: FaultProxy, server: Server, queue: dueq.Queue
) -> None:
    queue.enqueue("x", delay_ms=60_000)
    proxy.plan = ["503", "drop"]
    s = via(proxy, server, queue).stats()
    assert s is not None and s.scheduled == 1
    assert len(proxy.seen) == 3


def test_retries_stop_after_the_configured_count(
    proxy: FaultProxy, server: Server, queue: dueq.Queue
) -> None:
    proxy.plan = ["503"] * 10
    with pytest.raises(dueq.UnavailableError) as e:
        via(proxy, server, queue, retries=3).settings()
    assert e.value.status == 503 and len(proxy.seen) == 4
    proxy.seen.clear()
    with pytest.raises(dueq.UnavailableError):
        via(proxy, server, queue, retries=0).settings()
    assert len(proxy.seen) == 1


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.claim(1),
        lambda q: q.nack(("000000000001", "1"), "x"),
        lambda q: q.ack(("000000000001", "1")),
        lambda q: q.cancel("000000000001"),
        lambda q: q.purge("dead"),
        lambda q: q.trigger_schedule("s"),
        lambda q: q.dead_retry_matching(),
    ],
    ids=["claim", "nack", "ack", "cancel", "purge", "trigger", "dead_retry_matching"],
)
def test_calls_that_are_not_safe_to_repeat_are_sent_once(
    proxy: FaultProxy, server: Server, queue: dueq.Queue, call: Any
) -> None:
    proxy.plan = ["503"] * 3
    with pytest.raises(dueq.UnavailableError):
        call(via(proxy, server, queue))
    assert len(proxy.seen) == 1


def test_the_backoff_doubles_up_to_the_cap_with_jitter() -> None:
    p = RetryPolicy(retries=5, base_ms=100, max_ms=1000)
    assert [p.delay_s(n, lambda: 0.0) for n in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert [p.delay_s(n, lambda: 1.0) for n in range(3)] == [0.05, 0.1, 0.2]
    assert p.delay_s(1000, lambda: 0.0) == 1.0  # no overflow


@pytest.mark.parametrize(
    "kw, field",
    [({"retries": -1}, "retries"), ({"retry_base_ms": 0}, "retry_base_ms"),
     ({"retry_base_ms": 500, "retry_max_ms": 100}, "retry_max_ms"), ({"timeout_s": 0}, "timeout_s")],
)  # fmt: skip
def test_bad_retry_settings_name_the_field(kw: Any, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        dueq.Client("http://127.0.0.1:9", **kw)
    with pytest.raises(ValueError, match=field):
        dueq.AsyncClient("http://127.0.0.1:9", **kw)

