#!/usr/bin/env python3
"""Runs a real Prometheus against a live `dueq serve` and evaluates every query of the Grafana
dashboard (docs/grafana/dueq.json): each must be valid PromQL and, after a task is enqueued,
claimed and acknowledged while Prometheus scrapes, return a series with a number (not NaN).

    .ci/dashboard_queries.py http://127.0.0.1:PORT docs/grafana/dueq.json
"""
import json
import os
import math
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

# series that only exist once a queue has a limit configured: allowed to be empty here
MAY_BE_EMPTY = ("dueq_queue_throttled_seconds_total",)
DEADLINE_S = 60


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(prom, expr):
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return json.load(e)


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r) if r.status != 204 else None


def traffic(base):
    """One task enqueued, claimed and acknowledged: counters, lateness and run time move."""
    post(base, "/v1/queues/orders/tasks", {"payload": {"order": 7}})
    claim = post(base, "/v1/queues/orders/claim", {"max": 1, "wait_ms": 2000})
    for t in claim["tasks"]:
        post(base, f"/v1/queues/orders/tasks/{t['id']}/ack", {"lease_token": t["lease_token"]})


def missing(r, expr):
    """Why query answer `r` does not count: an error, no series, or only NaN; None if it does."""
    if r.get("status") != "success":
        return f"error {r.get('error')}"
    values = [float(v["value"][1]) for v in r["data"]["result"]]
    if not values:
        return None if any(m in expr for m in MAY_BE_EMPTY) else "no series"
    if all(math.isnan(v) for v in values):
        return "only NaN"
    return None


def main():
    target, dashboard = sys.argv[1], sys.argv[2]
    exprs = []
    for panel in json.load(open(dashboard))["panels"]:
        for t in panel.get("targets", []):
            expr = t["expr"].replace("$queue", ".*").replace("$__rate_interval", "30s")
            exprs.append((panel["title"], expr))
    work = tempfile.mkdtemp()
    port = free_port()
    host = urllib.parse.urlparse(target).netloc
    with open(os.path.join(work, "prometheus.yml"), "w") as f:
        f.write(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"scrape_configs:\n  - job_name: dueq\n    static_configs: [{{targets: ['{host}']}}]\n"
        )
    prom = subprocess.Popen(
        ["prometheus", f"--config.file={work}/prometheus.yml", f"--storage.tsdb.path={work}/data",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "prometheus.log"), "w"))
    url = f"http://127.0.0.1:{port}"
    try:
        # wait for a first scrape, then send traffic while Prometheus scrapes every second
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                r = query(url, "up{job='dueq'} == 1")
                if r.get("status") == "success" and r["data"]["result"]:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                print(open(os.path.join(work, "prometheus.log")).read()[-3000:])
                sys.exit("Prometheus did not scrape dueq serve in time")
            time.sleep(0.5)
        traffic(target)
        while True:
            failed = [f"{title}: {expr}: {why}" for title, expr in exprs
                      if (why := missing(query(url, expr), expr))]
            if not failed:
                break
            if time.monotonic() > deadline:
                sys.exit("dashboard queries failed:\n  " + "\n  ".join(failed))
            time.sleep(1)
        print(f"dashboard: {len(exprs)} queries of {len(json.load(open(dashboard))['panels'])} "
              "panels evaluated by Prometheus, each with a number")
    finally:
        prom.terminate()
        prom.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
