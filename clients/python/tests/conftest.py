"""A live ``dueq serve`` for the tests: started once per session on a free port of
127.0.0.1, with a bearer token and its own embedded redis-server in a temporary directory
(never the shared 6379); stopped (SIGTERM, then SIGKILL) at the end.

The binary: ``$DUEQ_BIN``, else the one cargo built (``$CARGO_TARGET_DIR`` or the
workspace's ``target``, debug before release)."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Iterator

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # the package under test, installed or not

import dueq  # noqa: E402

WORKSPACE = HERE.parents[2]


def dueq_binary() -> Path:
    if os.environ.get("DUEQ_BIN"):
        return Path(os.environ["DUEQ_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", WORKSPACE / "target"))
    for profile in ("debug", "release"):
        p = target / profile / "dueq"
        if p.exists():
            return p
    pytest.exit(f"no dueq binary under {target} (run `cargo build -p dueq-cli` or set DUEQ_BIN)", 2)


class Server:
    def __init__(self, *extra: str) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="dueq-pytest-")
        self.token = "t-" + secrets.token_hex(12)
        self.log = open(Path(self.dir.name) / "serve.log", "w+")
        env = dict(os.environ, DUEQ_TOKENS=self.token)
        env.pop("DUEQ_REDIS_URL", None)
        self.proc = subprocess.Popen(
            [str(dueq_binary()), "serve", "--listen", "127.0.0.1:0",
             "--data-dir", str(Path(self.dir.name) / "data"), *extra],
            stdout=subprocess.DEVNULL, stderr=self.log, env=env, cwd=self.dir.name,
        )  # fmt: skip
        self.url = self._wait_ready()

    def _wait_ready(self) -> str:
        deadline = time.monotonic() + 60
        url = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("dueq serve exited early:\n" + self.log_text())
            if url is None:
                m = re.search(r"listening on (http://[0-9.:]+)", self.log_text())
                url = m.group(1) if m else None
            if url is not None:
                try:
                    urllib.request.urlopen(url + "/readyz", timeout=2).read()
                    return url
                except OSError:
                    pass
            time.sleep(0.1)
        raise RuntimeError("dueq serve not ready in 60 s:\n" + self.log_text())

    def log_text(self) -> str:
        self.log.flush()
        return (Path(self.dir.name) / "serve.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        self.dir.cleanup()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = Server()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def clock_server() -> Iterator[Server]:
    """A second server, on the test clock (``dueq serve --test-clock``)."""
    s = Server("--test-clock")
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def client(server: Server) -> dueq.Client:
    return dueq.Client(server.url, token=server.token, timeout_s=20)


@pytest.fixture
def queue(client: dueq.Client) -> dueq.Queue:
    """A queue of its own for each test."""
    return client.queue("py-" + uuid.uuid4().hex[:12])


def wait_until(cond, timeout_s: float = 10.0, what: str = "condition"):
    """Polls ``cond`` until it returns a true value (returned) or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
