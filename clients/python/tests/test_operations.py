"""Every operation of the served OpenAPI document has a client method, sync and async; and
the calls added for them work against the live server."""

from __future__ import annotations

import time
import uuid
from typing import Dict, Tuple, Type

import pytest

import dueq
from conftest import Server, wait_until
from dueq import (
    AsyncClient,
    AsyncQueue,
    AsyncTestClock,
    Backoff,
    CancelOutcome,
    Client,
    ConflictError,
    InvalidInputError,
    NackOutcome,
    NotFoundError,
    Queue,
    RateLimit,
    RescheduleOutcome,
    ScheduleSetOutcome,
    TestClock,
)

# operationId of the served document -> the method that sends it
OPERATIONS: Dict[str, Tuple[Type[object], str]] = {
    "healthz": (Client, "health"),
    "readyz": (Client, "ready"),
    "metrics": (Client, "metrics"),
    "openapi_json": (Client, "openapi"),
    "list_queues": (Client, "queues_page"),
    "list_workers": (Client, "workers"),
    "beat_worker": (Client, "beat_worker"),
    "remove_worker": (Client, "remove_worker"),
    "get_test_clock": (TestClock, "now"),
    "move_test_clock": (TestClock, "advance"),
    "get_queue": (Queue, "stats"),
    "delete_queue": (Queue, "delete"),
    "pause_queue": (Queue, "pause"),
    "resume_queue": (Queue, "resume"),
    "purge_queue": (Queue, "purge"),
    "enqueue": (Queue, "enqueue"),
    "enqueue_batch": (Queue, "enqueue_batch"),
    "browse_tasks": (Queue, "browse"),
    "get_task": (Queue, "get"),
    "get_task_by_key": (Queue, "get"),
    "cancel_task": (Queue, "cancel"),
    "cancel_task_by_key": (Queue, "cancel"),
    "reschedule_task": (Queue, "reschedule"),
    "reschedule_task_by_key": (Queue, "reschedule"),
    "claim": (Queue, "claim"),
    # one ack or nack goes through the batch route (one request shape for both)
    "ack": (Queue, "ack"),
    "ack_batch": (Queue, "ack_batch"),
    "nack": (Queue, "nack"),
    "nack_batch": (Queue, "nack_batch"),
    "release_batch": (Queue, "release_batch"),
    "extend": (Queue, "extend"),
    "list_dead": (Queue, "dead_list"),
    "retry_dead": (Queue, "dead_retry"),
    "delete_dead": (Queue, "dead_delete"),
    "retry_dead_matching": (Queue, "dead_retry_matching"),
    "delete_dead_matching": (Queue, "dead_delete_matching"),
    "get_settings": (Queue, "settings"),
    "update_settings": (Queue, "update_settings"),
    "get_webhook": (Queue, "webhook"),
    "set_webhook": (Queue, "set_webhook"),
    "delete_webhook": (Queue, "delete_webhook"),
    "list_schedules": (Queue, "schedules_page"),
    "get_schedule": (Queue, "schedule"),
    "set_schedule": (Queue, "set_schedule"),
    "delete_schedule": (Queue, "delete_schedule"),
    "pause_schedule": (Queue, "pause_schedule"),
    "resume_schedule": (Queue, "resume_schedule"),
    "trigger_schedule": (Queue, "trigger_schedule"),
    "backfill_schedule": (Queue, "backfill_schedule"),
}
ASYNC = {Client: AsyncClient, Queue: AsyncQueue, TestClock: AsyncTestClock}


def test_every_operation_has_a_method(client: Client) -> None:
    doc = client.openapi()
    served = {
        op["operationId"]
        for item in doc["paths"].values()
        for method, op in item.items()
        if method in ("get", "put", "post", "patch", "delete")
    }
    assert served - OPERATIONS.keys() == set(), "operations without a client method"
    assert OPERATIONS.keys() - served == set(), "mapped operations the server no longer has"
    for op, (cls, name) in OPERATIONS.items():
        assert callable(getattr(cls, name, None)), f"{op}: {cls.__name__}.{name}"
        assert callable(getattr(ASYNC[cls], name, None)), f"{op}: async {name}"


def _public(cls: type) -> set:
    return {n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))}


def test_the_async_classes_have_every_method() -> None:
    assert _public(Queue) == _public(AsyncQueue) - {"sync"}
    # AsyncClient.queue hands out AsyncQueue; close is aclose there
    assert _public(Client) - {"close"} <= _public(AsyncClient)


def test_browse_pages_scheduled_and_active(queue: Queue) -> None:
    ids = [queue.enqueue(i, delay_ms=60_000 + i * 1000).id for i in range(5)]
    first = queue.browse(limit=2)
    assert [t.id for t in first.tasks] == ids[:2] and first.next is not None
    rest = queue.browse("scheduled", limit=10, after=first.next)
    assert [t.id for t in rest.tasks] == ids[2:] and rest.next is None
    assert queue.browse("active").tasks == []
    queue.reschedule(ids[0], delay_ms=0)
    [c] = queue.claim(1)
    [a] = queue.browse("active").tasks
    assert (a.id, a.state) == (c.id, "active")
    assert a.lease_expires_at_ms == c.lease_expires_at_ms
    with pytest.raises(InvalidInputError) as e:
        queue.browse("dead")
    assert "state" in e.value.message


def test_by_key_reschedule_and_a_dead_task_by_id(queue: Queue) -> None:
    e = queue.enqueue("k", key="inv/7", delay_ms=3_600_000)
    r = queue.reschedule(key="inv/7", delay_ms=10)
    assert r.outcome is RescheduleOutcome.RESCHEDULED and r.due_at_ms is not None
    assert r.due_at_ms < e.due_at_ms
    assert queue.reschedule(key="nope", delay_ms=10).outcome is RescheduleOutcome.NOT_FOUND
    [t] = wait_until(lambda: queue.claim(1), what="the rescheduled task")
    assert queue.nack(t, "boom", permanent=True).outcome is NackOutcome.DEAD
    # there is no route for one dead task: get() by id or key finds it, state "dead"
    for found in (queue.get(e.id), queue.get(key="inv/7")):
        assert found is not None and (found.id, found.state, found.last_error) == (e.id, "dead", "boom")
    with pytest.raises(ValueError, match="exactly one of id and key"):
        queue.get()


def test_purge_and_delete_queue(client: Client, queue: Queue) -> None:
    with pytest.raises(NotFoundError):
        queue.purge("scheduled")
    assert queue.delete() is False
    for i in range(3):
        queue.enqueue(i, delay_ms=60_000)
    with pytest.raises(ConflictError) as e:
        queue.delete()
    assert e.value.code == "not_empty"
    r = queue.purge("scheduled")
    assert (r.dropped, r.left) == (3, 0)
    with pytest.raises(InvalidInputError) as e:
        queue.purge("everything")
    assert "state" in e.value.message
    queue.enqueue("still here", delay_ms=60_000)
    queue.set_schedule("nightly", cron="0 3 * * *")
    assert queue.delete(force=True) is True
    assert queue.stats() is None and queue.schedule("nightly") is None
    assert queue.delete() is False


def test_bulk_dead_retry_and_delete(queue: Queue) -> None:
    for i, err in enumerate(["timeout a", "timeout b", "bad input", "timeout c"]):
        queue.enqueue(i, key=f"job:{i}", group="g1" if i < 2 else None)
        [t] = queue.claim(1)
        queue.nack(t, err, permanent=True)
    dry = queue.dead_retry_matching(error_contains="timeout", dry_run=True)
    assert (dry.matched, dry.done) == (3, 0)
    g = queue.dead_retry_matching(group="g1", limit=1)
    assert (g.matched, g.done, g.cursor) == (2, 1, None)
    g = queue.dead_retry_matching(group="g1")
    assert (g.matched, g.done) == (1, 1)
    s = queue.stats()
    assert s is not None and (s.scheduled, s.dead) == (2, 2)
    d = queue.dead_delete_matching(key_prefix="job:2")
    assert (d.matched, d.done) == (1, 1)
    assert [x.task.key for x in queue.dead_list().tasks] == ["job:3"]
    spread = queue.dead_retry_matching(spread_ms=60_000)
    assert spread.done == 1
    t = queue.get(key="job:3")
    assert t is not None and t.state == "scheduled"
    with pytest.raises(InvalidInputError) as e:
        queue.dead_retry_matching(error_contains="")
    assert "error_contains" in e.value.message
    with pytest.raises(InvalidInputError) as e:
        queue.dead_delete_matching(cursor="not a cursor")
    assert "cursor" in e.value.message


def test_settings_get_update_clear(queue: Queue) -> None:
    s = queue.settings()
    assert s.max_attempts is None and s.backoff is None
    s = queue.update_settings(
        max_attempts=3,
        backoff=Backoff(base_ms=500, factor=3.0, max_ms=60_000),
        rate_limit={"max": 10, "per_ms": 1000},
        on_expire="dead",
    )
    assert s.max_attempts == 3 and s.backoff == Backoff(500, 3.0, 60_000)
    assert s.rate_limit == RateLimit(10, 1000) and s.on_expire == "dead"
    assert queue.settings() == s
    s = queue.update_settings(rate_limit=None, dead_max=50)
    assert (s.rate_limit, s.dead_max, s.max_attempts) == (None, 50, 3)
    e = queue.enqueue("uses the queue's setting")
    t = queue.get(e.id)
    assert t is not None and t.max_attempts == 3
    for bad, field in (({"max_attempts": 0}, "max_attempts"), ({"colour": 1}, "colour")):
        with pytest.raises(InvalidInputError) as err:
            queue.update_settings(**bad)  # type: ignore[arg-type]
        assert field in err.value.message
    assert queue.settings() == s  # the refused changes wrote nothing


def test_schedules(queue: Queue) -> None:
    assert queue.schedules() == [] and queue.schedule("s") is None
    hour = 3_600_000
    a = queue.set_schedule("hourly", every_ms=hour, payload={"job": "sync"}, priority=3)
    assert a.outcome is ScheduleSetOutcome.CREATED and a.every_ms == hour and not a.paused
    assert a.next_fire_at_ms is not None and a.next_fire_at_ms % hour == 0
    again = queue.set_schedule("hourly", every_ms=hour, payload={"job": "sync"}, priority=3)
    assert again.outcome is ScheduleSetOutcome.UNCHANGED
    b = queue.set_schedule("berlin", cron="30 2 * * *", tz="Europe/Berlin", overlap="skip")
    assert (b.cron, b.tz, b.overlap, b.outcome) == ("30 2 * * *", "Europe/Berlin", "skip", "created")
    got = queue.schedule("hourly")
    assert got is not None and got.payload == {"job": "sync"} and got.outcome is None
    page = queue.schedules_page(limit=1)
    assert [s.name for s in page.schedules] == ["berlin"] and page.total == 2
    assert page.next is not None
    assert [s.name for s in queue.schedules_page(after=page.next).schedules] == ["hourly"]
    assert [s.name for s in queue.schedules()] == ["berlin", "hourly"]

    paused = queue.pause_schedule("hourly")
    assert paused.paused and paused.next_fire_at_ms is None and paused.upcoming_ms == []
    resumed = queue.resume_schedule("hourly")
    assert not resumed.paused and resumed.next_fire_at_ms is not None

    trig = queue.trigger_schedule("hourly")
    assert trig.key.startswith("schedule:hourly:manual:")
    t = queue.get(key=trig.key)
    assert t is not None and (t.id, t.payload, t.priority) == (trig.id, {"job": "sync"}, 3)

    to_ms = (int(time.time() * 1000) - 2 * hour) // hour * hour
    first = queue.backfill_schedule("hourly", to_ms - 5 * hour, to_ms)
    assert (first.ticks, first.created, first.existing) == (5, 5, 0)
    second = queue.backfill_schedule("hourly", to_ms - 5 * hour, to_ms)
    assert (second.ticks, second.created, second.existing) == (5, 0, 5)

    assert queue.delete_schedule("berlin") is True
    assert queue.delete_schedule("berlin") is False
    for call in (queue.pause_schedule, queue.resume_schedule, queue.trigger_schedule):
        with pytest.raises(NotFoundError):
            call("berlin")
    with pytest.raises(NotFoundError):
        queue.backfill_schedule("berlin", 0, 1000)
    with pytest.raises(InvalidInputError) as e:
        queue.set_schedule("bad", cron="every tuesday")
    assert "cron" in e.value.message
    with pytest.raises(InvalidInputError) as e:
        queue.set_schedule("bad", every_ms=10)
    assert "every_ms" in e.value.message
    assert [s.name for s in queue.schedules()] == ["hourly"]


def test_webhook_set_get_delete(queue: Queue) -> None:
    assert queue.webhook() is None
    assert queue.delete_webhook() is False
    w = queue.set_webhook("http://user:pw@127.0.0.1:9/hook", concurrency=2, timeout_ms=500)
    assert w.secret is not None and w.secret.startswith("whsec_") and w.secret_generated
    again = queue.set_webhook("http://user:pw@127.0.0.1:9/hook", concurrency=2, timeout_ms=500)
    assert (again.secret, again.secret_generated) == (w.secret, False)  # kept
    got = queue.webhook()
    assert got is not None and got.secret is None
    assert (got.url, got.concurrency, got.timeout_ms) == ("http://user:***@127.0.0.1:9/hook", 2, 500)
    with pytest.raises(InvalidInputError) as e:
        queue.set_webhook("ftp://example.com/")
    assert "url" in e.value.message
    assert queue.delete_webhook() is True
    assert queue.webhook() is None


def test_server_helpers(client: Client, server: Server) -> None:
    assert client.health() is True
    r = client.ready()
    assert r.ready and r.redis and r.scripts
    q = client.queue("py-" + uuid.uuid4().hex[:12])
    q.enqueue(1)
    text = client.metrics()
    assert f'queue="{q.name}"' in text and "# TYPE" in text
    assert client.openapi()["openapi"].startswith("3.")
    down = Client("http://127.0.0.1:9", timeout_s=1, retries=0)
    with pytest.raises(dueq.ConnectionFailedError):
        down.health()


def test_cancel_by_id_after_browse(queue: Queue) -> None:
    queue.enqueue("a", delay_ms=60_000)
    [t] = queue.browse().tasks
    assert queue.cancel(t.id) is CancelOutcome.CANCELLED
    assert queue.browse().tasks == []
