"""The heartbeat of a worker: keeps it in the server's live workers list (``GET
/v1/workers``, ``dueq workers``, the dashboard's Workers page) while it runs, and takes it
off when it stops.

One thread per running worker: a beat (``PUT /v1/workers/{id}``) at start, then every
``heartbeat_ms`` (default 5000), saying its queue, its concurrency, the handlers running at
that moment (``in_hand``), host name, pid, this client's version and ``python``; the entry
expires three intervals after the last beat, so a worker that dies leaves the list by itself.
A failed beat is logged and the next one comes at the next interval: it never stops the
worker. :meth:`Heartbeat.close` lets a beat in flight finish, then removes the entry
(``DELETE /v1/workers/{id}``): the removal is the worker's last call, and nothing registers
the entry again after it.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from typing import Callable, List, Optional

from ._version import __version__
from .client import Client
from .errors import DueqError

__all__ = [
    "DEFAULT_HEARTBEAT_MS",
    "HEARTBEAT_MISSES",
    "Heartbeat",
    "new_worker_id",
    "validate_heartbeat_ms",
]

log = logging.getLogger("dueq.worker")

DEFAULT_HEARTBEAT_MS = 5000
"""Default time between two beats, ms."""
MIN_HEARTBEAT_MS = 100
MAX_HEARTBEAT_MS = 60000
HEARTBEAT_MISSES = 3
"""Missed beats after which the entry expires (15 s by default)."""
LANGUAGE = "python"


def validate_heartbeat_ms(ms: int) -> int:
    """``ms`` when it is a valid interval (100 to 60000), else ``ValueError``."""
    if not MIN_HEARTBEAT_MS <= ms <= MAX_HEARTBEAT_MS:
        raise ValueError(f"heartbeat_ms must be {MIN_HEARTBEAT_MS} to {MAX_HEARTBEAT_MS}")
    return ms


def _host() -> str:
    try:
        return socket.gethostname() or "unknown"
    except OSError:
        return "unknown"


def new_worker_id() -> str:
    """``host:pid:`` and 8 random hex digits: two workers of one process are two entries.
    The host part keeps only printable ASCII without spaces (what the server accepts), at
    most 100 of them, so that the id fits a claim's ``worker_id`` (at most 200 bytes)."""
    host = "".join(c if "!" <= c <= "~" else "-" for c in _host())[:100]
    return f"{host}:{os.getpid()}:{secrets.token_hex(4)}"


class Heartbeat:
    """Beats for worker ``id`` on a thread of its own between :meth:`start` and
    :meth:`close`; ``in_hand`` is called at each beat (from that thread) for the number of
    handlers running."""

    def __init__(
        self,
        client: Client,
        id: str,
        queues: List[str],
        concurrency: int,
        in_hand: Callable[[], int],
        interval_ms: int = DEFAULT_HEARTBEAT_MS,
    ) -> None:
        self.client = client
        self.id = id
        self.queues = queues
        self.concurrency = concurrency
        self.interval_ms = validate_heartbeat_ms(interval_ms)
        self._in_hand = in_hand
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        """Registers the worker (the first beat, on the heartbeat's thread) and keeps it
        listed."""
        if self._thread is not None:
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dueq-heartbeat", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stops beating and removes the entry; returns once the removal is done (a beat in
        flight finishes first, each request bounded by the client's ``timeout_s``)."""
        t = self._thread
        if t is None:
            return
        self._stop.set()
        t.join()
        self._thread = None

    def _run(self) -> None:
        refused = False
        beaten = False
        interval_s = self.interval_ms / 1000.0
        try:
            while not self._stop.is_set():
                next_at = time.monotonic() + interval_s
                beaten = True
                try:
                    if self._beat():
                        refused = False
                    elif not refused:
                        refused = True
                        log.warning(
                            "dueq: the workers registry is full (10000 live entries): worker %s "
                            "is not listed; trying again at every beat",
                            self.id,
                        )
                except DueqError as e:
                    log.warning(
                        "dueq: heartbeat of worker %s failed; trying again at the next beat: %s",
                        self.id,
                        e,
                    )
                self._stop.wait(max(0.0, next_at - time.monotonic()))
            if beaten:
                try:
                    self.client.remove_worker(self.id)
                except DueqError as e:
                    log.warning(
                        "dueq: could not remove worker %s from the workers list; it expires "
                        "by itself: %s",
                        self.id,
                        e,
                    )
        finally:
            self.client.close()  # this thread's connection

    def _beat(self) -> bool:
        return self.client.beat_worker(
            self.id,
            self.queues,
            concurrency=self.concurrency,
            in_hand=self._in_hand(),
            host=_host(),
            pid=os.getpid(),
            version=__version__,
            language=LANGUAGE,
            ttl_ms=self.interval_ms * HEARTBEAT_MISSES,
        )
