"""The dead-letter queue: list, retry and delete one task, or every task a filter matches."""

from __future__ import annotations

from typing import Any, Dict, Optional

from ._base import QueueBase, code_of, seg
from .errors import DueqError
from .models import DeadBulkResult, DeadOutcome, DeadPage, DeadTask, Task

__all__ = ["DeadOps"]


class DeadOps(QueueBase):
    def dead_list(self, offset: int = 0, limit: int = 20) -> DeadPage:
        """One page of the dead-letter queue, newest first (``limit`` 1 to 1000). One dead
        task by id or key: :meth:`get`."""
        r = self._call("GET", f"/dead?offset={int(offset)}&limit={int(limit)}", retry=True)
        tasks = [DeadTask(Task.from_json(t), t["died_at_ms"]) for t in r["tasks"]]
        return DeadPage(total=r["total"], tasks=tasks)

    def dead_retry(self, id: str) -> DeadOutcome:
        """Schedules a dead task again, due now: ``RETRIED``, ``NOT_FOUND`` or ``CONFLICT``
        (its key is taken by another task: live, or in its unique window). Not retried (a
        second try answers ``NOT_FOUND``)."""
        return _dead_outcome(*self._request("POST", f"/dead/{seg('id', id)}/retry", retry=False))

    def dead_delete(self, id: str) -> DeadOutcome:
        """Deletes a dead task for good: ``DELETED`` or ``NOT_FOUND``. Not retried."""
        return _dead_outcome(*self._request("DELETE", f"/dead/{seg('id', id)}", retry=False))

    def dead_retry_matching(
        self,
        *,
        error_contains: Optional[str] = None,
        died_after_ms: Optional[int] = None,
        died_before_ms: Optional[int] = None,
        key_prefix: Optional[str] = None,
        group: Optional[str] = None,
        limit: Optional[int] = None,
        dry_run: bool = False,
        spread_ms: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> DeadBulkResult:
        """Retries every dead task the filters match (all given must match; none: every dead
        task), due now or spread evenly over ``spread_ms``. ``error_contains``: text in the
        last error; ``died_after_ms`` / ``died_before_ms``: epoch ms; ``key_prefix``;
        ``group``; ``limit``: most tasks to act on in this call; ``dry_run``: only count.

        The server does a bounded amount of work per call: while the answer has a
        ``cursor``, call again with it and the same filters. Retried only with ``dry_run``."""
        body = _filters(locals())
        return DeadBulkResult.from_json(self._call("POST", "/dead/retry", body, retry=dry_run))

    def dead_delete_matching(
        self,
        *,
        error_contains: Optional[str] = None,
        died_after_ms: Optional[int] = None,
        died_before_ms: Optional[int] = None,
        key_prefix: Optional[str] = None,
        group: Optional[str] = None,
        limit: Optional[int] = None,
        dry_run: bool = False,
        cursor: Optional[str] = None,
    ) -> DeadBulkResult:
        """Deletes every dead task the filters match, for good; filters, ``cursor`` and
        retries as in :meth:`dead_retry_matching`."""
        body = _filters(locals())
        return DeadBulkResult.from_json(self._call("POST", "/dead/delete", body, retry=dry_run))


def _filters(args: Dict[str, Any]) -> Dict[str, Any]:
    """The request body: the given filters (a method's keyword arguments)."""
    body = {k: v for k, v in args.items() if k != "self" and v is not None}
    if not body.get("dry_run"):
        body.pop("dry_run", None)
    return body


def _dead_outcome(status: int, r: Any) -> DeadOutcome:
    if status == 200:
        return DeadOutcome(r["outcome"])
    code = code_of(r)
    if status == 404 and code == "not_found":
        return DeadOutcome.NOT_FOUND
    if status == 409 and code == "conflict":
        return DeadOutcome.CONFLICT
    raise DueqError.from_response(status, r)
