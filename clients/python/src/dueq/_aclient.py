"""``AsyncClient`` and ``AsyncQueue``: every method of :class:`Client` and :class:`Queue` as
a coroutine, for asyncio programs.

Each async method is the sync method run on a thread of the client's own pool, so one
definition serves both: same arguments, same answers, same errors, same retries. Why threads
and not an asyncio HTTP/1.1 transport: the standard library has no asynchronous HTTP client,
and a second transport would be a second place for keep-alive, TLS, timeouts, error mapping
and retries to go wrong; the cost, a thread per call in flight, is small next to a network
round trip. The pool is the client's own (``max_threads``), not the event loop's default
executor, so long-poll claims cannot starve other ``to_thread`` users.

Cancelling an awaiting call does not stop its request: the thread finishes it, and it may
be applied (as after a ``timeout``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import ssl
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Optional, TypeVar

from ._test_clock import TestClock
from .client import Client, Queue

if TYPE_CHECKING:
    from typing_extensions import Concatenate, ParamSpec

    P = ParamSpec("P")

__all__ = ["AsyncClient", "AsyncQueue", "AsyncTestClock"]

T = TypeVar("T")


def _async(
    fn: "Callable[Concatenate[Any, P], T]",
) -> "Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]":
    """The coroutine method that runs the sync method ``fn`` on the wrapped object (``.sync``)
    in the client's thread pool; same signature and docs, awaited. It runs in a copy of the
    caller's context variables (as ``asyncio.to_thread`` does), so an enqueue carries the
    caller's trace context."""

    async def call(self: Any, /, *args: "P.args", **kwargs: "P.kwargs") -> T:
        ctx = contextvars.copy_context()
        result: T = await self._run(functools.partial(ctx.run, fn, self.sync, *args, **kwargs))
        return result

    functools.update_wrapper(call, fn)
    return call


class AsyncClient:
    """:class:`dueq.Client` for asyncio: the same arguments and methods, each ``async``.

    ``max_threads`` (default 16) bounds the requests in flight at once; more wait their turn.
    Close it with ``await client.aclose()`` or ``async with``.
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:7878",
        token: Optional[str] = None,
        *,
        timeout_s: float = 30.0,
        ssl_context: Optional[ssl.SSLContext] = None,
        retries: int = 2,
        retry_base_ms: int = 100,
        retry_max_ms: int = 2000,
        max_threads: int = 16,
    ) -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads must be at least 1, got {max_threads!r}")
        self.sync = Client(
            url,
            token,
            timeout_s=timeout_s,
            ssl_context=ssl_context,
            retries=retries,
            retry_base_ms=retry_base_ms,
            retry_max_ms=retry_max_ms,
        )
        """The :class:`dueq.Client` doing the requests (for a :class:`dueq.Worker`, say)."""
        self.url = url
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_threads, thread_name_prefix="dueq-aio"
        )

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    def queue(self, name: str) -> "AsyncQueue":
        """A handle on queue ``name``. No request is sent."""
        return AsyncQueue(self, name)

    @property
    def test_clock(self) -> "AsyncTestClock":
        """:attr:`dueq.Client.test_clock`, each method ``async``."""
        return AsyncTestClock(self)

    async def aclose(self) -> None:
        """Lets the calls in flight finish, then ends the pool's threads (and their
        connections)."""
        await asyncio.get_running_loop().run_in_executor(None, self._pool.shutdown)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    queues = _async(Client.queues)
    queues_page = _async(Client.queues_page)
    workers = _async(Client.workers)
    beat_worker = _async(Client.beat_worker)
    remove_worker = _async(Client.remove_worker)
    health = _async(Client.health)
    ready = _async(Client.ready)
    metrics = _async(Client.metrics)
    openapi = _async(Client.openapi)


class AsyncTestClock:
    """:class:`dueq.TestClock` for asyncio: the same methods, each ``async``."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, client: AsyncClient) -> None:
        self.sync = client.sync.test_clock
        self._run = client._run

    now = _async(TestClock.now)
    advance = _async(TestClock.advance)
    set = _async(TestClock.set)


class AsyncQueue:
    """:class:`dueq.Queue` for asyncio: the same methods, each ``async``. Get one from
    :meth:`AsyncClient.queue`."""

    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client = client
        self.name = name
        self.sync = client.sync.queue(name)
        """The :class:`dueq.Queue` doing the requests."""

    def __repr__(self) -> str:
        return f"AsyncQueue({self.name!r})"

    async def _run(self, fn: Callable[[], T]) -> T:
        return await self.client._run(fn)

    # one line per method of Queue; tests/test_operations.py checks that none is missing
    enqueue = _async(Queue.enqueue)
    enqueue_batch = _async(Queue.enqueue_batch)
    get = _async(Queue.get)
    cancel = _async(Queue.cancel)
    reschedule = _async(Queue.reschedule)
    browse = _async(Queue.browse)
    claim = _async(Queue.claim)
    ack = _async(Queue.ack)
    ack_batch = _async(Queue.ack_batch)
    nack = _async(Queue.nack)
    nack_batch = _async(Queue.nack_batch)
    release_batch = _async(Queue.release_batch)
    extend = _async(Queue.extend)
    dead_list = _async(Queue.dead_list)
    dead_retry = _async(Queue.dead_retry)
    dead_delete = _async(Queue.dead_delete)
    dead_retry_matching = _async(Queue.dead_retry_matching)
    dead_delete_matching = _async(Queue.dead_delete_matching)
    stats = _async(Queue.stats)
    pause = _async(Queue.pause)
    resume = _async(Queue.resume)
    purge = _async(Queue.purge)
    delete = _async(Queue.delete)
    settings = _async(Queue.settings)
    update_settings = _async(Queue.update_settings)
    webhook = _async(Queue.webhook)
    set_webhook = _async(Queue.set_webhook)
    delete_webhook = _async(Queue.delete_webhook)
    schedules = _async(Queue.schedules)
    schedules_page = _async(Queue.schedules_page)
    schedule = _async(Queue.schedule)
    set_schedule = _async(Queue.set_schedule)
    delete_schedule = _async(Queue.delete_schedule)
    pause_schedule = _async(Queue.pause_schedule)
    resume_schedule = _async(Queue.resume_schedule)
    trigger_schedule = _async(Queue.trigger_schedule)
    backfill_schedule = _async(Queue.backfill_schedule)
