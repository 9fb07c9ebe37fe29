#!/usr/bin/env python3
"""W6 (DESIGN 6): 100 000 due tasks drained through ``dueq serve`` by 8 Python processes
running ``dueq.Worker`` (claim ``max`` 100, batch acks, no-op handler); W6e: HTTP batch
enqueue (1 000 per request).

    python3 clients/python/bench/w6.py --bin target/release/dueq --runs 3

Each run starts a fresh ``dueq serve`` (own embedded redis-server, temporary directory, free
port on 127.0.0.1), enqueues ``--tasks`` due tasks (W6e: timed), starts ``--procs`` worker
processes, lets them connect, then signals all at once and times until the queue's
``succeeded_total`` reaches the count. Reports tasks/s, Redis CPU per task (``INFO cpu``), the
server's CPU per task (``/proc/PID/stat``) and the worker processes' (``getrusage``, their
whole lives), per run and the median.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import dueq  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / CLK  # utime + stime


def redis_info(url: str, section: str) -> dict:
    """``INFO section`` of the Redis at ``url`` (``redis+unix:///path`` or ``redis://host:port``)."""
    if url.startswith("redis+unix://"):
        s = socket.socket(socket.AF_UNIX)
        s.connect(url[len("redis+unix://") :].split("?")[0])
    else:
        m = re.match(r"redis://(?:[^@]*@)?([^:/]+):(\d+)", url)
        if not m:
            raise ValueError(f"cannot read a host:port from {url}")
        s = socket.create_connection((m.group(1), int(m.group(2))), timeout=5)
    with s:
        s.sendall(f"INFO {section}\r\n".encode())
        buf = b""
        while True:
            buf += s.recv(65536)
            if b"\r\n" in buf:
                n = int(buf[1 : buf.index(b"\r\n")])
                if len(buf) >= buf.index(b"\r\n") + 2 + n:
                    break
    body = buf[buf.index(b"\r\n") + 2 :].decode()
    return dict(line.split(":", 1) for line in body.splitlines() if ":" in line and not line.startswith("#"))


def redis_cpu_s(url: str) -> float:
    i = redis_info(url, "cpu")
    return float(i["used_cpu_sys"]) + float(i["used_cpu_user"])


class Serve:
    def __init__(self, binary: str) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="dueq-w6-")
        self.log_path = Path(self.dir.name) / "serve.log"
        self.log = open(self.log_path, "w")
        env = dict(os.environ)
        env.pop("DUEQ_TOKENS", None)
        env.pop("DUEQ_REDIS_URL", None)
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--data-dir", str(Path(self.dir.name) / "data")],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=self.dir.name,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        self.url = self.redis = None
        while time.monotonic() < deadline:
            text = self.log_path.read_text()
            self.url = self.url or _find(r"listening on (http://[0-9.:]+)", text)
            self.redis = self.redis or _find(r"embedded Redis at (\S+)", text)
            if self.url and self.redis:
                try:
                    urllib.request.urlopen(self.url + "/readyz", timeout=2).read()
                    return
                except OSError:
                    pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("dueq serve did not start:\n" + self.log_path.read_text())

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        self.dir.cleanup()


def _find(pattern: str, text: str):
    m = re.search(pattern, text)
    return m.group(1) if m else None


def worker_proc(url: str, queue: str, concurrency: int, prefetch: int, ready, go) -> None:
    client = dueq.Client(url)
    q = client.queue(queue)
    q.stats()  # connection open before the start
    ready.release()
    go.wait()
    w = dueq.Worker(client, q, lambda task: None, concurrency=concurrency, claim_max=100,
                    poll_ms=1000, prefetch=prefetch)  # fmt: skip
    w.run()  # until SIGTERM


def one_run(args) -> dict:
    s = Serve(args.bin)
    try:
        client = dueq.Client(s.url)
        q = client.queue("w6")
        batch = [dueq.TaskSpec(payload={"n": i}) for i in range(1000)]
        t0 = time.perf_counter()
        for _ in range(args.tasks // 1000):
            q.enqueue_batch(batch)
        enqueue_s = time.perf_counter() - t0
        ctx = mp.get_context("fork")
        ready = ctx.Semaphore(0)
        go = ctx.Event()
        procs = [ctx.Process(target=worker_proc, args=(s.url, "w6", args.concurrency, args.prefetch, ready, go))
                 for _ in range(args.procs)]  # fmt: skip
        for p in procs:
            p.start()
        for _ in procs:
            ready.acquire()
        redis0, serve0 = redis_cpu_s(s.redis), proc_cpu_s(s.proc.pid)
        t0 = time.perf_counter()
        go.set()
        while True:
            st = q.stats()
            if st is not None and st.succeeded_total >= args.tasks:
                break
            time.sleep(0.005)
        drain_s = time.perf_counter() - t0
        redis1, serve1 = redis_cpu_s(s.redis), proc_cpu_s(s.proc.pid)
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        for p in procs:
            os.kill(p.pid, signal.SIGTERM)
        for p in procs:
            p.join(30)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        # the worker processes' whole lives (start-up and the idle wait included)
        workers_s = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
        return {
            "enqueue_tasks_per_s": args.tasks / enqueue_s,
            "drain_tasks_per_s": args.tasks / drain_s,
            "redis_cpu_us_per_task": (redis1 - redis0) * 1e6 / args.tasks,
            "server_cpu_us_per_task": (serve1 - serve0) * 1e6 / args.tasks,
            "workers_cpu_us_per_task": workers_s * 1e6 / args.tasks,
            "failed_total": st.failed_total,
        }
    finally:
        s.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/dueq")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=4, help="handler threads per process")
    ap.add_argument("--prefetch", type=int, default=100, help="tasks claimed ahead per process")
    args = ap.parse_args()
    runs = []
    for i in range(args.runs):
        r = one_run(args)
        runs.append(r)
        print(json.dumps({"run": i + 1, **{k: round(v, 2) for k, v in r.items()}}), flush=True)
    med = {k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0]}
    print(json.dumps({"median": med, "runs": args.runs, "tasks": args.tasks, "procs": args.procs,
                      "concurrency": args.concurrency, "prefetch": args.prefetch}))  # fmt: skip


if __name__ == "__main__":
    main()
