"""When a failed request is sent again: the retry policy of :class:`dueq.Client`.

Only calls that give the same result when repeated are retried (each method says whether it
is; the README has the table): a read, an enqueue with a business key (the server keeps one
task per live key), a schedule or settings write. A keyless enqueue, a claim, an ack or a
nack is never sent twice: its first try may have been applied.

A retryable call is sent again when the server was not reached or the connection broke
(``connection_failed``), when no answer came in time (``timeout``), and when the server
answered 503 (Redis unavailable, a write not replicated) or 408 (its own time limit). Each
wait is a capped exponential backoff with jitter, so many clients that lost the same server
do not come back at the same instant. No I/O here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

__all__ = ["RETRY_STATUSES", "RetryPolicy"]

RETRY_STATUSES = frozenset({408, 503})
"""Answers after which a retryable call is sent again."""


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` extra tries (0: none) after waits of ``base_ms * 2 ** n``, at most
    ``max_ms``, each shortened by a random part of up to half (jitter)."""

    retries: int = 2
    base_ms: int = 100
    max_ms: int = 2000

    def __post_init__(self) -> None:
        if not 0 <= self.retries <= 100:
            raise ValueError(f"retries must be 0 to 100, got {self.retries!r}")
        if not 1 <= self.base_ms <= 60_000:
            raise ValueError(f"retry_base_ms must be 1 to 60000, got {self.base_ms!r}")
        if not self.base_ms <= self.max_ms <= 600_000:
            raise ValueError(
                f"retry_max_ms must be retry_base_ms ({self.base_ms}) to 600000,"
                f" got {self.max_ms!r}"
            )

    def delay_s(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """The wait before retry number ``attempt`` (0 for the first retry), seconds: between
        half and all of ``min(max_ms, base_ms * 2 ** attempt)``."""
        cap_ms = min(self.max_ms, self.base_ms << min(attempt, 32))
        return cap_ms * (1.0 - rand() / 2.0) / 1000.0
