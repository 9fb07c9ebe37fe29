"""The queue itself: statistics, pause and resume, purge, delete, settings, webhook."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

from ._base import QueueBase
from .models import PurgeResult, QueueStats, Settings, SettingsChanges, Webhook

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["AdminOps"]


class AdminOps(QueueBase):
    def stats(self) -> Optional[QueueStats]:
        """The queue's counts; ``None`` for a queue that never had a task."""
        r = self._found("GET", "", retry=True)
        return None if r is None else QueueStats.from_json(r)

    def pause(self) -> bool:
        """Stops handing out tasks; returns ``True`` (paused)."""
        return bool(self._call("POST", "/pause", retry=True)["paused"])

    def resume(self) -> bool:
        """Hands out tasks again; returns ``False`` (not paused)."""
        return bool(self._call("POST", "/resume", retry=True)["paused"])

    def purge(self, state: str) -> PurgeResult:
        """Drops every task in ``state``: ``"scheduled"`` (counted as cancelled), ``"dead"``
        or ``"succeeded"``. The server does a bounded amount per call: call again while
        ``left`` > 0. Not retried (a second try drops tasks enqueued since the first).

        Raises :class:`NotFoundError` for a queue that never had a task."""
        r = self._call("POST", "/purge", {"state": state}, retry=False)
        return PurgeResult(r["dropped"], r["left"])

    def delete(self, *, force: bool = False) -> bool:
        """Deletes the queue with its tasks in every state, settings, counters, schedules and
        webhook; ``False`` when there was no such queue. Not retried.

        Raises :class:`ConflictError` ``not_empty`` while tasks are scheduled or running,
        unless ``force``."""
        sub = "?force=true" if force else ""
        return self._found("DELETE", sub, retry=False) is not None

    # --- settings -------------------------------------------------------------------------

    def settings(self) -> Settings:
        """The queue's settings (``None`` fields: the built-in default)."""
        return Settings.from_json(self._call("GET", "/settings", retry=True))

    def update_settings(self, **changes: "Unpack[SettingsChanges]") -> Settings:
        """Changes the settings given and keeps the others; ``None`` puts one back to its
        default. Returns the settings after the change. Retried (the same change twice
        leaves the same settings)::

            q.update_settings(max_attempts=10, rate_limit=RateLimit(max=100, per_ms=1000))

        Raises :class:`InvalidInputError` naming the field (nothing written)."""
        body: Dict[str, Any] = {}
        for name, v in changes.items():
            to_json = getattr(v, "to_json", None)
            body[name] = to_json() if callable(to_json) else v
        return Settings.from_json(self._call("PATCH", "/settings", body, retry=True))

    # --- push delivery --------------------------------------------------------------------

    def webhook(self) -> Optional[Webhook]:
        """The queue's push delivery target without its secret; ``None`` when it has none."""
        r = self._found("GET", "/webhook", retry=True)
        return None if r is None else Webhook.from_json(r)

    def set_webhook(
        self,
        url: str,
        *,
        secret: Optional[str] = None,
        concurrency: Optional[int] = None,
        timeout_ms: Optional[int] = None,
    ) -> Webhook:
        """Sets (or replaces) the queue's push delivery target: every server POSTs its due
        tasks to ``url`` within about a second. ``secret``: ``whsec_`` and the base64 of 24
        to 64 bytes (default: keep the current one, or generate one); the answer carries it
        (keep it: :meth:`webhook` never shows it). ``concurrency``: deliveries in flight per
        server, 1 to 1000 (default 10); ``timeout_ms``: 1 to 300000 (default 10000).
        Retried: a second try stores the same target and keeps the secret."""
        body: Dict[str, Any] = {"url": url}
        options = (("secret", secret), ("concurrency", concurrency), ("timeout_ms", timeout_ms))
        for name, v in options:
            if v is not None:
                body[name] = v
        return Webhook.from_json(self._call("PUT", "/webhook", body, retry=True))

    def delete_webhook(self) -> bool:
        """Removes the push delivery target; ``False`` when there was none. Not retried."""
        return self._found("DELETE", "/webhook", retry=False) is not None
