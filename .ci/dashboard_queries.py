#!/usr/bin/env python3
"""Runs a real Prometheus against a live `dueq serve` and evaluates every query of the Grafana
dashboard (docs/grafana/dueq.json): each must be valid PromQL and, after the traffic
.ci/promtool sends, return series.

    .ci/dashboard_queries.py http://127.0.0.1:PORT docs/grafana/dueq.json
"""
import json
import os
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
        # wait until rates over the scrapes have values (two samples in the window)
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                r = query(url, "rate(dueq_tasks_enqueued_total[30s])")
                if r.get("status") == "success" and r["data"]["result"]:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                print(open(os.path.join(work, "prometheus.log")).read()[-3000:])
                sys.exit("Prometheus did not scrape dueq serve in time")
            time.sleep(0.5)
        failed = []
        for title, expr in exprs:
            r = query(url, expr)
            if r.get("status") != "success":
                failed.append(f"{title}: {expr}: {r.get('error')}")
            elif not r["data"]["result"] and not any(m in expr for m in MAY_BE_EMPTY):
                failed.append(f"{title}: {expr}: no series")
        if failed:
            sys.exit("dashboard queries failed:\n  " + "\n  ".join(failed))
        print(f"dashboard: {len(exprs)} queries of {len(json.load(open(dashboard))['panels'])} "
              "panels evaluated by Prometheus, each with series")
    finally:
        prom.terminate()
        prom.wait()


if __name__ == "__main__":
    main()
