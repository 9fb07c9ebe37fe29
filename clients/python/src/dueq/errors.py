"""The one exception type of the client: a failure of the API (or of reaching it)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConflictError",
    "ConnectionFailedError",
    "DueqError",
    "InvalidInputError",
    "NotFoundError",
    "TimeoutError_",
    "UnauthorizedError",
    "UnavailableError",
    "error_for",
]


class DueqError(Exception):
    """A request the server refused or could not serve.

    ``code`` is the API's stable error code (``invalid_input``, ``invalid_json``,
    ``unauthorized``, ``payload_too_large``, ``unsupported_media_type``, ``redis_unavailable``,
    ``not_replicated``, ``request_timeout``, ``internal``, ...); ``connection_failed`` when
    the server could not be reached, or the connection broke (after the request went out, it
    may have been applied); ``timeout`` when the request was sent and no answer came in time,
    so it may have been applied (resend an enqueue with its key, which adds no second task
    while the first is live). ``status`` is the HTTP status (0 for ``connection_failed`` and
    ``timeout``). Expected outcomes (a task not found, a cancel that finds the task running, a
    stale lease token) are return values, never this exception.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code} ({status}): {message}" if status else f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message

    @classmethod
    def from_response(cls, status: int, body: Any) -> "DueqError":
        """Builds the error from an answer's ``{"error": {"code", "message"}}`` body: the
        subclass of its code (:func:`error_for`)."""
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            e = body["error"]
            return error_for(status, str(e.get("code", "unknown")), str(e.get("message", "")))
        return DueqError(status, "unexpected_response", repr(body)[:500])


class InvalidInputError(DueqError):
    """Bad input, nothing written: ``invalid_input``, ``invalid_json``,
    ``payload_too_large``, ``unsupported_media_type``."""


class UnauthorizedError(DueqError):
    """No token, a wrong one, or a refused host or origin: ``unauthorized``,
    ``forbidden_host``, ``forbidden_origin``."""


class NotFoundError(DueqError):
    """``not_found``: no such route, queue, schedule or webhook."""


class ConflictError(DueqError):
    """The state refuses it: ``conflict``, ``in_progress``, ``unique_window``,
    ``not_empty``."""


class UnavailableError(DueqError):
    """The server could not serve it now; retry later: ``redis_unavailable``,
    ``not_replicated``, ``request_timeout``, ``internal``. A write may or may not have been
    applied."""


class ConnectionFailedError(DueqError):
    """``connection_failed``: the server was not reached, or the connection broke."""


class TimeoutError_(DueqError):
    """``timeout``: the request was sent and no answer came in time; it may have been
    applied. (Named with a trailing underscore so it does not shadow the built-in.)"""


_BY_CODE = {
    "invalid_input": InvalidInputError,
    "invalid_json": InvalidInputError,
    "payload_too_large": InvalidInputError,
    "unsupported_media_type": InvalidInputError,
    "unauthorized": UnauthorizedError,
    "forbidden_host": UnauthorizedError,
    "forbidden_origin": UnauthorizedError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "in_progress": ConflictError,
    "unique_window": ConflictError,
    "not_empty": ConflictError,
    "redis_unavailable": UnavailableError,
    "not_replicated": UnavailableError,
    "request_timeout": UnavailableError,
    "internal": UnavailableError,
    "connection_failed": ConnectionFailedError,
    "timeout": TimeoutError_,
}


def error_for(status: int, code: str, message: str) -> DueqError:
    """The :class:`DueqError` subclass of ``code`` (a plain :class:`DueqError` for a code
    this version does not know)."""
    return _BY_CODE.get(code, DueqError)(status, code, message)
