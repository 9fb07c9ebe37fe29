"""The one exception type of the client: a failure of the API (or of reaching it)."""

from __future__ import annotations

from typing import Any

__all__ = ["DueqError"]


class DueqError(Exception):
    """A request the server refused or could not serve.

    ``code`` is the API's stable error code (``invalid_input``, ``invalid_json``,
    ``unauthorized``, ``payload_too_large``, ``unsupported_media_type``, ``redis_unavailable``,
    ``not_replicated``, ``request_timeout``, ``internal``, ...); ``connection_failed`` when
    the server could not be reached or the connection broke; ``timeout`` when the request was
    sent and no answer came in time, so it may have been applied (resend an enqueue with its
    key, which adds no second task while the first is live). ``status`` is the HTTP status (0
    for ``connection_failed`` and ``timeout``). Expected outcomes (a task not found, a cancel that finds the
    task running, a stale lease token) are return values, never this exception.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code} ({status}): {message}" if status else f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message

    @classmethod
    def from_response(cls, status: int, body: Any) -> "DueqError":
        """Builds the error from an answer's ``{"error": {"code", "message"}}`` body."""
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            e = body["error"]
            return cls(status, str(e.get("code", "unknown")), str(e.get("message", "")))
        return cls(status, "unexpected_response", repr(body)[:500])
