"""The pull protocol (what :class:`dueq.Worker` uses): claim, ack, nack, extend, release.

None of these is retried except ``extend``: a second claim would hold more leases, and a
second ack, nack or release would answer ``lease_lost`` for the task the first one settled.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from ._base import Lease, QueueBase, chunks, code_of, lease_of, seg
from .errors import DueqError
from .models import AckOutcome, ClaimedTask, NackOutcome, NackResult, ReleaseOutcome

__all__ = ["PullOps"]


class PullOps(QueueBase):
    def claim(
        self,
        max: int = 1,
        wait_ms: int = 0,
        lease_ms: Optional[int] = None,
        *,
        worker_id: Optional[str] = None,
    ) -> List[ClaimedTask]:
        """Claims up to ``max`` (1 to 1000) due tasks, waiting up to ``wait_ms`` (0 to 60000)
        for the first one; each under a lease of ``lease_ms`` (default: the task's own).

        ``worker_id`` (1 to 200 bytes of printable ASCII without spaces; the workers send
        their ``id``) is kept with each lease: while the task runs, :meth:`get` shows it as
        :attr:`Task.worker_id`."""
        body: Dict[str, Any] = {"max": max, "wait_ms": wait_ms}
        if lease_ms is not None:
            body["lease_ms"] = lease_ms
        if worker_id is not None:
            body["worker_id"] = worker_id
        timeout_s = self.client.timeout_s + wait_ms / 1000.0
        status, r = self._request("POST", "/claim", body, retry=False, timeout_s=timeout_s)
        if status != 200:
            raise DueqError.from_response(status, r)
        return [ClaimedTask.from_json(self.name, t) for t in r["tasks"]]

    def ack(self, task: Lease) -> AckOutcome:
        """Completes a claimed task: ``ACKED`` or ``LEASE_LOST`` (nothing changed)."""
        return self.ack_batch([task])[0]

    def ack_batch(self, tasks: Sequence[Lease]) -> List[AckOutcome]:
        """Completes many claimed tasks, one request per 1000; one outcome per task, in order
        (a stale token refuses only its own task)."""
        return [AckOutcome(o) for o in self._settle("acks", tasks)]

    def nack(
        self,
        task: Lease,
        error: Optional[str] = None,
        *,
        retry_in_ms: Optional[int] = None,
        permanent: bool = False,
    ) -> NackResult:
        """Fails the current attempt: retried after ``retry_in_ms`` (default: the queue's
        backoff) or dead-lettered (``permanent`` or out of attempts). ``error`` is kept as
        the task's ``last_error``."""
        return self.nack_batch([(task, error, retry_in_ms, permanent)])[0]

    def nack_batch(
        self, items: Sequence[Tuple[Lease, Optional[str], Optional[int], bool]]
    ) -> List[NackResult]:
        """Fails many attempts, one request per 1000: items are ``(task, error, retry_in_ms,
        permanent)``; one result per item, in order."""
        out: List[NackResult] = []
        for chunk in chunks(items):
            body = []
            for task, error, retry_in_ms, permanent in chunk:
                i, t = lease_of(task)
                n: Dict[str, Any] = {"id": i, "lease_token": t}
                if error is not None:
                    n["error"] = error
                if retry_in_ms is not None:
                    n["retry_in_ms"] = retry_in_ms
                if permanent:
                    n["permanent"] = True
                body.append(n)
            r = self._call("POST", "/nacks", {"nacks": body}, retry=False)
            out.extend(
                NackResult(NackOutcome(x["outcome"]), x.get("due_at_ms")) for x in r["results"]
            )
        return out

    def release_batch(self, tasks: Sequence[Lease]) -> List[ReleaseOutcome]:
        """Hands leases back unfinished: each task is due again at once and the attempt is
        not counted (what a stopping worker does with tasks it did not run)."""
        return [ReleaseOutcome(o) for o in self._settle("releases", tasks)]

    def _settle(self, route: str, tasks: Sequence[Lease]) -> List[str]:
        """Sends ``{"acks" or "releases": [{id, lease_token}]}``, 1000 a request; the
        outcomes in order."""
        out: List[str] = []
        for chunk in chunks(tasks):
            items = [{"id": i, "lease_token": t} for i, t in map(lease_of, chunk)]
            r = self._call("POST", "/" + route, {route: items}, retry=False)
            out.extend(x["outcome"] for x in r["results"])
        return out

    def extend(
        self, task: Lease, lease_ms: int, *, timeout_s: Optional[float] = None
    ) -> Optional[int]:
        """Extends a lease to ``lease_ms`` from now; the new deadline (epoch ms), or ``None``
        when the lease was lost. Retried: a second try sets the same deadline. ``timeout_s``
        bounds each try (default: the client's), so a hung connection cannot outlast the
        lease it should keep."""
        i, t = lease_of(task)
        body = {"lease_token": t, "lease_ms": lease_ms}
        status, r = self._request(
            "POST", f"/tasks/{seg('id', i)}/extend", body, retry=True, timeout_s=timeout_s
        )
        if status == 200:
            return int(r["lease_expires_at_ms"])
        if status == 409 and code_of(r) == "lease_lost":
            return None
        raise DueqError.from_response(status, r)
