"""The client's calls against a live server: outcomes as values, errors as DueqError."""

from __future__ import annotations

import pytest

import dueq
from dueq import (
    AckOutcome,
    CancelOutcome,
    DeadOutcome,
    DueqError,
    NackOutcome,
    ReleaseOutcome,
    RescheduleOutcome,
    TaskSpec,
)


def test_enqueue_get_cancel_by_key(queue: dueq.Queue) -> None:
    e = queue.enqueue({"order": 42}, key="order:42/cancel ü", delay_ms=60_000)
    assert e.created and e.id
    again = queue.enqueue({"order": 43}, key="order:42/cancel ü", delay_ms=60_000)
    assert (again.id, again.created) == (e.id, False)
    t = queue.get(key="order:42/cancel ü")
    assert t is not None
    assert (t.id, t.state, t.payload, t.attempt) == (e.id, "scheduled", {"order": 42}, 0)
    assert queue.get(e.id) == t
    assert queue.cancel(key="order:42/cancel ü") is CancelOutcome.CANCELLED
    assert queue.cancel(key="order:42/cancel ü") == "not_found"
    assert queue.get(key="order:42/cancel ü") is None
    assert queue.get("000000000000") is None


def test_groups_round_trip(queue: dueq.Queue) -> None:
    e = queue.enqueue({"payout": 7}, group="merchant:981")
    t = queue.get(e.id)
    assert t is not None and t.group == "merchant:981"
    queue.enqueue_batch([TaskSpec({"payout": 8}, group="merchant:2")])
    claimed = queue.claim(max=10)
    assert sorted(c.group or "" for c in claimed) == ["merchant:2", "merchant:981"]
    with pytest.raises(DueqError) as err:
        queue.enqueue({}, group="")
    assert err.value.code == "invalid_input"


def test_task_options(queue: dueq.Queue) -> None:
    """priority orders due tasks; ttl_ms shows as expires_at_ms; debounce caps the due time."""
    queue.enqueue("nine", priority=9)
    e = queue.enqueue("two", priority=2, key="opt", ttl_ms=60000)
    t = queue.get(key="opt")
    assert t is not None and t.priority == 2 and t.expires_at_ms is not None
    r = queue.enqueue(
        "two-b", key="opt", delay_ms=600000, on_conflict="debounce", debounce_max_ms=60000
    )
    assert not r.created and r.due_at_ms == t.created_at_ms + 60000
    queue.enqueue_batch([TaskSpec("zero"), TaskSpec("five", priority=5)])
    claimed = queue.claim(max=10)
    assert [c.payload for c in claimed] == ["zero", "five", "nine"]
    assert e.id


def test_unique_window(queue: dueq.Queue) -> None:
    """After the task finished its key stays taken: a re-send answers the finished task, a
    replace is refused with unique_window; a window without a key is refused."""
    e = queue.enqueue({"order": 42}, key="order-42", unique_for_ms=60_000)
    [t] = queue.claim(max=1)
    assert queue.ack(t) is AckOutcome.ACKED
    again = queue.enqueue({"order": 42}, key="order-42", unique_for_ms=60_000)
    assert (again.id, again.created, again.state) == (e.id, False, "succeeded")
    with pytest.raises(dueq.ConflictError) as err:
        queue.enqueue({"order": 42}, key="order-42", on_conflict="replace")
    assert err.value.code == "unique_window"
    [b] = queue.enqueue_batch([TaskSpec({"order": 42}, key="order-42")])
    assert isinstance(b, dueq.Enqueued) and b.state == "succeeded"
    with pytest.raises(dueq.InvalidInputError) as bad:
        queue.enqueue({}, unique_for_ms=1000)
    assert "unique_for_ms" in bad.value.message
    queue.update_settings(unique_for_ms=3_600_000)
    assert queue.settings().unique_for_ms == 3_600_000


def test_a_durable_enqueue_names_missing_replicas(queue: dueq.Queue) -> None:
    # the test server has no replicas: the write lands on the primary, unconfirmed
    with pytest.raises(dueq.UnavailableError) as e:
        queue.enqueue({"order": 1}, replicas=1)
    assert e.value.code == "not_replicated"
    assert queue.enqueue({"order": 2}, replicas=0).created


def test_reschedule_and_in_progress(queue: dueq.Queue) -> None:
    e = queue.enqueue("x", delay_ms=3_600_000)
    r = queue.reschedule(e.id, delay_ms=0)
    assert r.outcome is RescheduleOutcome.RESCHEDULED and r.due_at_ms is not None
    assert r.due_at_ms < e.due_at_ms
    [t] = queue.claim(max=10)
    assert t.id == e.id and t.payload == "x" and t.attempt == 1
    assert queue.cancel(e.id) is CancelOutcome.IN_PROGRESS
    assert queue.reschedule(e.id, delay_ms=5).outcome is RescheduleOutcome.IN_PROGRESS
    assert queue.ack(t) is AckOutcome.ACKED
    assert queue.reschedule(e.id, delay_ms=5).outcome is RescheduleOutcome.NOT_FOUND


def test_batch_stats_and_answers(queue: dueq.Queue) -> None:
    out = queue.enqueue_batch([TaskSpec(i) for i in range(5)] + [{"payload": 5, "key": "k"}])
    assert all(isinstance(x, dueq.Enqueued) and x.created for x in out)
    tasks = queue.claim(max=10)
    assert [t.payload for t in tasks] == [0, 1, 2, 3, 4, 5]
    acks = queue.ack_batch([tasks[0], (tasks[1].id, "stale"), tasks[2]])
    assert acks == [AckOutcome.ACKED, AckOutcome.LEASE_LOST, AckOutcome.ACKED]
    n = queue.nack_batch([(tasks[3], "boom", 60_000, False), (tasks[4], "bad", None, True)])
    assert [x.outcome for x in n] == [NackOutcome.RESCHEDULED, NackOutcome.DEAD]
    assert n[0].due_at_ms is not None and n[1].due_at_ms is None
    assert queue.release_batch([tasks[5]]) == [ReleaseOutcome.RELEASED]
    assert queue.extend(tasks[1], 60_000) is not None
    assert queue.extend(tasks[0], 60_000) is None  # acked: lease gone
    s = queue.stats()
    assert s is not None
    assert (s.scheduled, s.active, s.dead, s.succeeded_total) == (2, 1, 1, 2)
    assert any(q.queue == queue.name for q in queue.client.queues())
    t3 = queue.get(tasks[3].id)
    assert t3 is not None and t3.last_error == "boom"


def test_dead_letters(queue: dueq.Queue) -> None:
    e = queue.enqueue("d", key="dk")
    [t] = queue.claim()
    assert queue.nack(t, "gone", permanent=True).outcome is NackOutcome.DEAD
    page = queue.dead_list()
    assert page.total == 1 and page.tasks[0].task.id == e.id
    assert page.tasks[0].task.last_error == "gone" and page.tasks[0].died_at_ms > 0
    queue.enqueue("live", key="dk")
    assert queue.dead_retry(e.id) is DeadOutcome.CONFLICT
    assert queue.dead_delete(e.id) is DeadOutcome.DELETED
    assert queue.dead_delete(e.id) is DeadOutcome.NOT_FOUND
    assert queue.dead_retry(e.id) is DeadOutcome.NOT_FOUND


def test_pause_resume_and_unknown_queue(client: dueq.Client, queue: dueq.Queue) -> None:
    assert queue.stats() is None
    assert queue.pause() is True
    queue.enqueue(1)
    assert queue.claim(max=5) == []
    assert queue.resume() is False
    assert len(queue.claim(max=5)) == 1


def test_queues_are_paged_by_name(client: dueq.Client) -> None:
    import uuid

    prefix = "pg-" + uuid.uuid4().hex[:12] + "-"
    for n in "cab":
        client.queue(prefix + n).enqueue(n, delay_ms=3_600_000)
    page = client.queues_page(limit=2, after=prefix)
    assert [q.queue for q in page.queues] == [prefix + "a", prefix + "b"]
    assert page.next == prefix + "b" and page.total >= 3
    rest = client.queues_page(limit=1, after=page.next)
    assert [q.queue for q in rest.queues] == [prefix + "c"]
    assert {prefix + n for n in "abc"} <= {q.queue for q in client.queues()}
    with pytest.raises(DueqError) as e:
        client.queues_page(limit=0)
    assert (e.value.status, e.value.code) == (400, "invalid_input")


def test_errors_carry_the_api_code(server, queue: dueq.Queue) -> None:
    with pytest.raises(DueqError) as e:
        queue.enqueue(1, delay_ms=1, due_at_ms=1)
    assert (e.value.status, e.value.code) == (400, "invalid_input")
    with pytest.raises(DueqError) as e:
        queue.client.queue("bad name").enqueue(1)
    assert e.value.code == "invalid_input"
    with pytest.raises(DueqError) as e:
        queue.enqueue_batch([])
    assert e.value.code == "invalid_input"
    with pytest.raises(DueqError) as e:
        queue.enqueue("x" * (2 << 20))
    assert (e.value.status, e.value.code) == (413, "payload_too_large")
    queue.enqueue("after 413: the connection still works")
    noauth = dueq.Client(server.url, token="wrong").queue(queue.name)
    with pytest.raises(DueqError) as e:
        noauth.stats()
    assert (e.value.status, e.value.code) == (401, "unauthorized")
    down = dueq.Client("http://127.0.0.1:9", timeout_s=2).queue("q")
    with pytest.raises(DueqError) as e:
        down.enqueue(1)
    assert (e.value.status, e.value.code) == (0, "connection_failed")
    assert isinstance(e.value, dueq.ConnectionFailedError)


def test_errors_are_subclasses_by_code(client: dueq.Client, queue: dueq.Queue) -> None:
    with pytest.raises(dueq.InvalidInputError) as e:
        client.queue("bad name").enqueue(1)
    assert e.value.code == "invalid_input" and isinstance(e.value, DueqError)
    with pytest.raises(dueq.UnauthorizedError):
        dueq.Client(client.url, token="wrong").queue(queue.name).stats()
    # every code of the API maps to its class; an unknown one stays a plain DueqError
    from dueq.errors import error_for

    for code, cls in [
        ("not_found", dueq.NotFoundError),
        ("not_empty", dueq.ConflictError),
        ("in_progress", dueq.ConflictError),
        ("redis_unavailable", dueq.UnavailableError),
        ("request_timeout", dueq.UnavailableError),
        ("payload_too_large", dueq.InvalidInputError),
    ]:
        assert type(error_for(400, code, "m")) is cls, code
    assert type(error_for(400, "a_code_from_later", "m")) is DueqError


def test_a_request_sent_but_not_answered_in_time_is_a_timeout() -> None:
    import socket
    import threading

    # a server that accepts and reads, and never answers
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    held = []

    def accept() -> None:
        c, _ = srv.accept()
        held.append(c)
        c.recv(65536)

    threading.Thread(target=accept, daemon=True).start()
    try:
        mute = dueq.Client(
            f"http://127.0.0.1:{srv.getsockname()[1]}", timeout_s=0.5, retries=0
        ).queue("q")
        with pytest.raises(DueqError) as e:
            mute.enqueue(1, key="order:1")
        # sent, so it may have landed: not the same as a server never reached
        assert (e.value.status, e.value.code) == (0, "timeout")
        assert isinstance(e.value, dueq.TimeoutError_)
    finally:
        for c in held:
            c.close()
        srv.close()


def test_long_poll_returns_when_a_task_is_enqueued(client: dueq.Client, queue: dueq.Queue) -> None:
    import threading

    got = []
    t = threading.Thread(target=lambda: got.extend(queue.claim(max=1, wait_ms=10_000)))
    t.start()
    queue.enqueue("wake", delay_ms=200)
    t.join(15)
    assert [x.payload for x in got] == ["wake"]


def test_beat_list_and_remove_a_worker(client: dueq.Client) -> None:
    import uuid

    wid = "py-test:1:" + uuid.uuid4().hex[:8]
    queue = "pyw-" + uuid.uuid4().hex[:12]
    assert client.beat_worker(
        wid, [queue], concurrency=4, in_hand=1, host="box", pid=1, version="9.9.9",
        language="python", ttl_ms=60_000,
    )  # fmt: skip
    [w] = [x for x in client.workers() if x.id == wid]
    assert (w.kind, w.host, w.pid, w.version, w.language) == ("worker", "box", 1, "9.9.9", "python")
    assert (w.queues, w.concurrency, w.in_hand) == ([queue], 4, 1)
    assert w.started_at_ms <= w.last_seen_ms < w.expires_at_ms
    assert [x.id for x in client.workers(queue)] == [wid]
    assert client.workers("pyw-none-" + uuid.uuid4().hex[:8]) == []
    # the server itself is listed too, as a Rust process
    assert any(x.kind == "server" and x.language == "rust" for x in client.workers())
    assert client.beat_worker(wid, [queue], concurrency=4, in_hand=3)
    [w] = client.workers(queue)
    assert w.in_hand == 3
    assert client.remove_worker(wid) is True
    assert client.workers(queue) == []
    assert client.remove_worker(wid) is False


def test_a_bad_beat_names_the_field(client: dueq.Client) -> None:
    with pytest.raises(DueqError) as e:
        client.beat_worker("py-test:1:bad", ["q"], concurrency=1, ttl_ms=5)
    assert (e.value.status, e.value.code) == (400, "invalid_input")
    assert "ttl_ms" in e.value.message
    with pytest.raises(DueqError) as e:
        client.beat_worker("py-test:1:bad", ["bad name"], concurrency=1)
    assert e.value.code == "invalid_input" and "queues" in e.value.message
    with pytest.raises(DueqError) as e:
        client.beat_worker("has space", ["q"], concurrency=1)
    assert e.value.code == "invalid_input" and "id" in e.value.message
    with pytest.raises(DueqError) as e:
        client.workers("bad name")
    assert e.value.code == "invalid_input"
    assert all(w.id != "py-test:1:bad" for w in client.workers())


def test_claim_names_its_worker(queue: dueq.Queue) -> None:
    """An active task shows the ``worker_id`` its claim named, and when it was claimed."""
    a, b, c = (queue.enqueue(p) for p in ("a", "b", "c"))
    [ta] = queue.claim(1, worker_id="py-test:1:cafe0001")
    [tb] = queue.claim(1)
    ga, gb, gc = queue.get(ta.id), queue.get(tb.id), queue.get(c.id)
    assert ga is not None and gb is not None and gc is not None
    assert (ta.id, tb.id) == (a.id, b.id)
    assert (ga.state, ga.worker_id) == ("active", "py-test:1:cafe0001")
    assert ga.claimed_at_ms is not None and ga.due_at_ms <= ga.claimed_at_ms
    # unnamed claim: claimed, holder unknown; a scheduled task has neither
    assert (gb.state, gb.worker_id) == ("active", None) and gb.claimed_at_ms is not None
    assert (gc.state, gc.worker_id, gc.claimed_at_ms) == ("scheduled", None, None)
    for bad in ("has space", "x" * 201):
        with pytest.raises(DueqError) as err:
            queue.claim(1, worker_id=bad)
        assert err.value.code == "invalid_input" and "worker_id" in err.value.message
    gc = queue.get(c.id)
    assert gc is not None and gc.state == "scheduled"  # the refused claims took nothing
    assert queue.ack_batch([ta, tb]) == [AckOutcome.ACKED, AckOutcome.ACKED]


def test_dot_path_parts_are_refused_before_sending(queue: dueq.Queue) -> None:
    # URL parsers fold "." and ".." away, so such a request would reach another route
    for call, field in [
        (lambda: queue.cancel(key=".."), "key"),
        (lambda: queue.get("."), "id"),
        (lambda: queue.delete_schedule(".."), "name"),
        (lambda: queue.dead_delete(""), "id"),
    ]:
        with pytest.raises(dueq.InvalidInputError) as e:
            call()
        assert str(e.value.message).startswith(f"{field}: "), e.value.message


def test_stats_carry_limits_and_alerts(client: dueq.Client, queue: dueq.Queue) -> None:
    queue.update_settings(concurrency=3, alert_due_count=1)
    queue.enqueue({"n": 1})
    queue.enqueue({"n": 2})
    s = queue.stats()
    assert s is not None
    assert (s.concurrency_limit, s.behind, s.expired_total, s.extra) == (3, True, 0, {})
    with pytest.raises(dueq.NotFoundError):
        client.queue("never-used").purge("scheduled")
