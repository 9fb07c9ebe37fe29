"""HTTP transport: one keep-alive ``http.client`` connection per thread.

``urllib.request`` opens a new TCP connection per request; a worker that claims and acks
hundreds of times a second spends most of its time in connection set-up that way. Here each
thread keeps its own connection (``http.client`` connections are not thread-safe) and opens
a new one only when the old one was closed by the server.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import ssl
import threading
import urllib.parse
from typing import Any, Dict, Optional, Tuple

from .errors import error_for

__all__ = ["Transport"]


class Transport:
    """Sends JSON requests to one dueq server; safe to share between threads."""

    def __init__(
        self,
        url: str,
        token: Optional[str] = None,
        timeout_s: float = 90.0,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"dueq: expected an http:// or https:// URL, got {url!r}")
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._prefix = u.path.rstrip("/")
        self._timeout_s = timeout_s
        self._ssl_context = ssl_context
        self._headers: Dict[str, str] = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = "Bearer " + token
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn: Optional[http.client.HTTPConnection] = getattr(self._local, "conn", None)
        if conn is not None and conn.sock is not None and _dropped(conn.sock):
            conn.close()
        if conn is None:
            if self._https:
                conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout_s, context=self._ssl_context
                )
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
            self._local.conn = conn
        return conn

    def close(self) -> None:
        """Closes this thread's connection (others close when their threads end)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout_s: Optional[float] = None,
    ) -> Tuple[int, Any]:
        """Sends one request; returns ``(status, parsed JSON body or None)``.

        Raises :class:`DueqError` with code ``connection_failed`` when the server cannot be
        reached or the connection breaks, and ``timeout`` when the request was sent but no
        answer came within the timeout: then it may have been applied.
        """
        headers = dict(self._headers)
        data: Optional[bytes] = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        conn = self._connection()
        if timeout_s is not None:
            conn.timeout = timeout_s
            if conn.sock is not None:
                conn.sock.settimeout(timeout_s)
        sent = False
        try:
            conn.request(method, self._prefix + path, body=data, headers=headers)
            sent = True
            res = conn.getresponse()
            raw = res.read()
            status = res.status
            if res.will_close:
                conn.close()
        except socket.timeout as e:
            conn.close()
            if sent:
                raise error_for(
                    0,
                    "timeout",
                    f"{method} {path}: no answer within the timeout; it may have been applied",
                ) from e
            raise error_for(0, "connection_failed", f"{method} {path}: {e}") from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise error_for(0, "connection_failed", f"{method} {path}: {e}") from e
        finally:
            if timeout_s is not None:
                conn.timeout = self._timeout_s
                if conn.sock is not None:
                    conn.sock.settimeout(self._timeout_s)
        if not raw:
            return status, None
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode("utf-8", "replace")


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle keep-alive socket was closed by the server (readable = EOF or junk)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
