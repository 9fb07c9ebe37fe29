"""What a handler's return value (or exception) means, shared by both workers.

A handler returns ``None`` (or anything that is not :class:`Retry` / :class:`Fail`) for
success: the task is acknowledged. It returns :class:`Retry` to try again after a delay of
its choosing, :class:`Fail` to send the task straight to the dead-letter queue, or raises:
the attempt fails with the exception's text as ``last_error`` and the queue's backoff
decides when it runs again (the dead-letter queue after ``max_attempts``).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Optional, Tuple

__all__ = ["Fail", "Retry"]


@dataclass(frozen=True)
class Retry:
    """Fail this attempt and run the task again in ``in_ms`` (``None``: the queue's backoff)."""

    in_ms: Optional[int] = None
    error: str = "retry requested"


@dataclass(frozen=True)
class Fail:
    """Fail for good: straight to the dead-letter queue, whatever attempts are left."""

    error: str = "failed permanently"


# (kind, error, retry_in_ms, permanent): kind "ack" or "nack"
Verdict = Tuple[str, Optional[str], Optional[int], bool]


def verdict(result: object) -> Verdict:
    """The answer to send for a handler's return value."""
    if isinstance(result, Retry):
        return ("nack", result.error, result.in_ms, False)
    if isinstance(result, Fail):
        return ("nack", result.error, None, True)
    return ("ack", None, None, False)


def failure(e: BaseException) -> Verdict:
    """The answer to send for a handler's exception: its type, message and where it was
    raised (the innermost frame), kept as the task's ``last_error``."""
    text = "".join(traceback.format_exception_only(type(e), e)).strip()
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        f = tb.tb_frame.f_code
        text += f" (at {f.co_filename}:{tb.tb_lineno} in {f.co_name})"
    return ("nack", text, None, False)
