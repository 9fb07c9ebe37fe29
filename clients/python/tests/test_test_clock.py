"""The test clock of a server started with ``dueq serve --test-clock``: a timer tested in
well under a second of wall time, moves checked, and a server without the clock refusing."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest

import dueq
from dueq import CancelOutcome, InvalidInputError, NotFoundError


def test_cancelled_after_30_minutes_unless_paid(clock_server) -> None:
    client = dueq.Client(clock_server.url, token=clock_server.token, timeout_s=20)
    orders = client.queue("orders-" + uuid.uuid4().hex[:8])
    started = time.monotonic()
    for order in (42, 43):
        orders.enqueue({"order": order}, key=f"order:{order}:cancel", delay_ms=30 * 60_000)
    # order 43 is paid: its timer is cancelled
    assert orders.cancel(key="order:43:cancel") == CancelOutcome.CANCELLED
    client.test_clock.advance(timedelta(minutes=29, seconds=59))
    assert orders.claim(10) == []
    client.test_clock.advance(1000)
    claimed = orders.claim(10, wait_ms=1000)
    assert [t.payload for t in claimed] == [{"order": 42}]
    assert claimed[0].due_at_ms <= client.test_clock.now().now_ms
    assert time.monotonic() - started < 1.0


def test_moves_are_checked_and_forward_only(clock_server) -> None:
    clock = dueq.Client(clock_server.url, token=clock_server.token).test_clock
    before = clock.now()
    with pytest.raises(InvalidInputError, match=r"\(400\): advance_ms"):
        clock.advance(0)
    with pytest.raises(InvalidInputError, match=r"\(400\): set_ms"):
        clock.set(before.now_ms - 60_000)
    with pytest.raises(ValueError, match="aware"):
        clock.set(datetime(2030, 1, 1))
    assert clock.now().offset_ms == before.offset_ms
    later = clock.set(datetime.fromtimestamp(before.now_ms / 1000 + 3600, timezone.utc))
    assert later.offset_ms >= before.offset_ms + 3_599_000
    ready = dueq.Client(clock_server.url).ready()
    assert ready.test_clock is not None and ready.test_clock.offset_ms == later.offset_ms


def test_async_clock(clock_server) -> None:
    async def run() -> dueq.ClockReading:
        async with dueq.AsyncClient(clock_server.url, token=clock_server.token) as c:
            before = await c.test_clock.now()
            moved = await c.test_clock.advance(timedelta(seconds=5))
            assert moved.offset_ms == before.offset_ms + 5000
            return moved

    assert asyncio.run(run()).now_ms > 0


def test_a_server_without_the_clock_says_so(client: dueq.Client) -> None:
    with pytest.raises(NotFoundError, match="--test-clock"):
        client.test_clock.now()
    with pytest.raises(NotFoundError):
        client.test_clock.advance(1000)
    assert client.ready().test_clock is None
