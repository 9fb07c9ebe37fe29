"""The built wheel, installed in a fresh venv, against a live `dueq serve`.

Run by .ci/clients from a temporary directory with that venv's python, so `import dueq`
can only find the installed wheel. Usage: python python_wheel_smoke.py PATH_TO_DUEQ_BINARY
"""

import asyncio
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import dueq
from dueq import AsyncClient, Client

where = pathlib.Path(dueq.__file__).resolve()
assert str(where).startswith(str(pathlib.Path(sys.prefix).resolve())), where
assert (where.parent / "py.typed").exists(), "py.typed not installed"

with tempfile.TemporaryDirectory(prefix="dueq-wheel-") as tmp:
    log = pathlib.Path(tmp, "serve.log")
    with log.open("w") as err:
        serve = subprocess.Popen(
            [sys.argv[1], "serve", "--listen", "127.0.0.1:0", "--data-dir", f"{tmp}/data"],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert serve.poll() is None and time.monotonic() < deadline, log.read_text()
            m = re.search(r"listening on (http://[0-9.:]+)", log.read_text())
            if m:
                url = m.group(1)
                client = Client(url)
                try:
                    if client.ready().ready:
                        break
                except dueq.DueqError:
                    pass
            time.sleep(0.1)
        q = client.queue("wheel-smoke")
        e = q.enqueue({"hello": "wheel"}, key="smoke:1", delay_ms=60_000)
        assert [t.id for t in q.browse().tasks] == [e.id]
        assert q.update_settings(max_attempts=3).max_attempts == 3
        assert q.set_schedule("tick", every_ms=60_000).outcome == "created"

        async def aio() -> None:
            async with AsyncClient(url) as ac:
                aq = ac.queue("wheel-smoke")
                t = await aq.get(key="smoke:1")
                assert t is not None and t.payload == {"hello": "wheel"}
                assert [s.name for s in await aq.schedules()] == ["tick"]

        asyncio.run(aio())
        assert q.delete(force=True) is True
        print(f"dueq {dueq.__version__} wheel at {where.parent}: routes answer as expected")
    finally:
        serve.terminate()
        serve.wait(30)
