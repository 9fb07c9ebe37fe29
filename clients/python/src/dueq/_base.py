"""What every part of :class:`dueq.Queue` shares: its name, its path, and the request helpers.

:class:`dueq.Queue` is put together from one mixin per resource of the API (``_tasks``,
``_pull``, ``_dead``, ``_admin``, ``_schedules``), so that no file holds every call. Each
call names ``retry=True`` or ``retry=False`` where it sends its request: whether repeating it
is safe is decided there, next to the route, and nowhere else.
"""

from __future__ import annotations

import urllib.parse
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from .errors import DueqError, error_for
from .models import ClaimedTask

if TYPE_CHECKING:
    from .client import Client

__all__ = [
    "MAX_BATCH",
    "Lease",
    "QueueBase",
    "chunks",
    "code_of",
    "every_page",
    "lease_of",
    "seg",
]

T = TypeVar("T")

MAX_BATCH = 1000
"""Most items in one batch request (enqueue, acks, nacks, releases) and one claim."""

Lease = Union[ClaimedTask, Tuple[str, str]]
"""A claimed task, or its ``(id, lease_token)``."""


def seg(field: str, s: str) -> str:
    """``s`` as one path segment: every character outside the unreserved set encoded, ``/``
    included (keys may hold any character). An empty ``s``, ``.`` or ``..`` raises
    ``invalid_input`` naming ``field``: URL parsers drop or fold those segments, so the
    request would reach another route."""
    if s in ("", ".", ".."):
        raise error_for(
            400, "invalid_input", f'{field}: must not be empty, "." or "..", got {s!r}'
        )
    return urllib.parse.quote(s, safe="")


def lease_of(t: Lease) -> Tuple[str, str]:
    if isinstance(t, ClaimedTask):
        return t.id, t.lease_token
    return t[0], t[1]


def code_of(body: Any) -> Optional[str]:
    """The ``error.code`` of an answer, if it has one."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        c = body["error"].get("code")
        return c if isinstance(c, str) else None
    return None


def chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), MAX_BATCH):
        yield items[i : i + MAX_BATCH]


def every_page(page: Callable[[Optional[str]], Tuple[Sequence[T], Optional[str]]]) -> List[T]:
    """Every item of a list the API pages by name: ``page(after)`` gives one page's items and
    its ``next`` (``None`` at the end)."""
    out: List[T] = []
    after: Optional[str] = None
    while True:
        items, after = page(after)
        out.extend(items)
        if after is None:
            return out


class QueueBase:
    """A queue's name and path, and requests under ``/v1/queues/{queue}``."""

    def __init__(self, client: "Client", name: str) -> None:
        self.client = client
        self.name = name
        self._base = "/v1/queues/" + seg("queue", name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def _request(
        self,
        method: str,
        sub: str,
        body: Any = None,
        *,
        retry: bool,
        timeout_s: Optional[float] = None,
    ) -> Tuple[int, Any]:
        return self.client._request(method, self._base + sub, body, timeout_s, retry=retry)

    def _call(self, method: str, sub: str, body: Any = None, *, retry: bool) -> Any:
        """The answer's body; a :class:`DueqError` for anything but 200 or 201."""
        return self.client._call(method, self._base + sub, body, retry=retry)

    def _found(self, method: str, sub: str, body: Any = None, *, retry: bool) -> Optional[Any]:
        """The answer's body, or ``None`` for 404 ``not_found`` (no such task, queue,
        schedule or webhook)."""
        status, r = self._request(method, sub, body, retry=retry)
        if status == 404 and code_of(r) == "not_found":
            return None
        if status not in (200, 201):
            raise DueqError.from_response(status, r)
        return r
