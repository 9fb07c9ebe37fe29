"""AsyncClient / AsyncQueue against the live server: the sync methods, awaited."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from typing import Any, Awaitable, Callable, List

import pytest

import dueq
from conftest import Server
from dueq import AsyncClient, AsyncQueue, AsyncWorker, CancelOutcome, Queue


def run(server: Server, body: Callable[[AsyncClient, AsyncQueue], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with AsyncClient(server.url, token=server.token, timeout_s=20) as c:
            return await body(c, c.queue("pya-" + uuid.uuid4().hex[:12]))

    return asyncio.run(main())


def test_methods_keep_the_sync_signature_and_docs() -> None:
    for name in ("enqueue", "get", "update_settings", "set_schedule", "claim"):
        sync, aio = getattr(Queue, name), getattr(AsyncQueue, name)
        assert inspect.iscoroutinefunction(aio), name
        assert inspect.signature(aio) == inspect.signature(sync), name
        assert aio.__doc__ == sync.__doc__ and aio.__doc__
    assert inspect.iscoroutinefunction(AsyncClient.queues)


def test_produce_look_up_and_settle(server: Server) -> None:
    async def body(c: AsyncClient, q: AsyncQueue) -> None:
        e = await q.enqueue({"order": 1}, key="order:1", delay_ms=60_000)
        again = await q.enqueue({"order": 1}, key="order:1", delay_ms=60_000)
        assert e.created and (again.id, again.created) == (e.id, False)
        t = await q.get(key="order:1")
        assert t is not None and t.id == e.id
        assert [x.id for x in (await q.browse()).tasks] == [e.id]
        assert (await q.reschedule(e.id, delay_ms=0)).outcome == "rescheduled"
        [claimed] = await q.claim(1)
        assert await q.ack(claimed) == "acked"
        assert await q.cancel(e.id) is CancelOutcome.NOT_FOUND
        s = await q.stats()
        assert s is not None and s.succeeded_total == 1
        assert q.name in {x.queue for x in await c.queues()}
        assert await c.health() is True

    run(server, body)


def test_many_calls_at_once_and_a_long_poll_does_not_block_the_loop(server: Server) -> None:
    async def body(c: AsyncClient, q: AsyncQueue) -> None:
        # the long-poll waits in its thread while the loop goes on enqueueing
        poll = asyncio.ensure_future(q.claim(max=1, wait_ms=15_000))
        results = await asyncio.gather(*(q.enqueue(i, key=f"k{i}", delay_ms=60_000) for i in range(20)))
        assert len({r.id for r in results}) == 20 and not poll.done()
        await q.enqueue("wake")
        [got] = await asyncio.wait_for(poll, 15)
        assert got.payload == "wake"

    run(server, body)


def test_admin_calls_and_errors(server: Server) -> None:
    async def body(c: AsyncClient, q: AsyncQueue) -> None:
        s = await q.update_settings(max_attempts=2)
        assert s.max_attempts == 2 and (await q.settings()).max_attempts == 2
        sch = await q.set_schedule("every-minute", every_ms=60_000)
        assert sch.outcome == "created" and [x.name for x in await q.schedules()] == [sch.name]
        assert await q.delete_schedule(sch.name) is True
        assert await q.webhook() is None
        with pytest.raises(dueq.InvalidInputError) as e:
            await q.update_settings(lease_ms=1)
        assert "lease_ms" in e.value.message
        with pytest.raises(dueq.NotFoundError):
            await q.trigger_schedule("nope")
        with pytest.raises(dueq.InvalidInputError):
            await c.queue("bad name").enqueue(1)

    run(server, body)


def test_async_worker_takes_an_async_client(server: Server) -> None:
    async def body(c: AsyncClient, q: AsyncQueue) -> List[Any]:
        seen: List[Any] = []
        worker: AsyncWorker

        async def handle(task: dueq.ClaimedTask) -> None:
            seen.append(task.payload)
            worker.stop()

        worker = AsyncWorker(c, q, handle, poll_ms=200, handle_signals=False)
        await q.enqueue("job")
        stats = await asyncio.wait_for(worker.run(), 30)
        assert stats.acked == 1
        return seen

    assert run(server, body) == ["job"]
