"""``TestClock``: the test clock of a server started with ``dueq serve --test-clock``.

Every queue of that server runs on a virtual clock (Redis time plus an offset kept in
Redis). A test moves it forward instead of sleeping: enqueue "cancel in 30 minutes",
``client.test_clock.advance(timedelta(minutes=30))``, and a waiting worker gets the task at
once. The clock only moves forward.
"""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, Union

from .models import ClockReading

if TYPE_CHECKING:
    from .client import Client

__all__ = ["TestClock"]


def _ms(by: Union[int, _dt.timedelta]) -> int:
    if isinstance(by, _dt.timedelta):
        return int(round(by.total_seconds() * 1000))
    return by


class TestClock:
    """The test clock of the client's server; :attr:`Client.test_clock` hands it out. On a
    server without the test clock every call raises :class:`NotFoundError`."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, client: "Client") -> None:
        self._client = client

    def now(self) -> ClockReading:
        """The clock now (``GET /v1/test/clock``). Retried."""
        return ClockReading.from_json(self._client._call("GET", "/v1/test/clock", retry=True))

    def advance(self, by: Union[int, _dt.timedelta]) -> ClockReading:
        """Moves the clock forward by ``by`` (ms, or a ``timedelta``; 1 ms to 100 years) and
        returns it as moved. Every process of the server's Redis looks at once: tasks that
        became due go to waiting workers, leases and expiries that passed end, schedules fire
        or skip the ticks crossed by their misfire policy. Not retried (a second try would
        move it twice).

        Raises :class:`InvalidInputError` naming ``advance_ms`` (nothing moves)."""
        body = {"advance_ms": _ms(by)}
        return ClockReading.from_json(
            self._client._call("POST", "/v1/test/clock", body, retry=False)
        )

    def set(self, at: Union[int, _dt.datetime]) -> ClockReading:
        """Moves the clock forward to ``at`` (Unix epoch ms, or an aware ``datetime``), as
        :meth:`advance` does. Not retried (a second try would find the clock past ``at``).

        Raises :class:`InvalidInputError` naming ``set_ms`` for a time before the clock's
        now."""
        if isinstance(at, _dt.datetime):
            if at.tzinfo is None:
                raise ValueError("at: give an aware datetime (with a tzinfo), or epoch ms")
            at = int(round(at.timestamp() * 1000))
        body = {"set_ms": at}
        return ClockReading.from_json(
            self._client._call("POST", "/v1/test/clock", body, retry=False)
        )
