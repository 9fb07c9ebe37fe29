#!/usr/bin/env python3
"""dueq over HTTP from Python, standard library only (urllib).

Enqueues a task with a business key and cancels it (the "payment arrived" path), then
enqueues a few due tasks and works the queue through claim / ack / nack: a task whose
payload asks to fail is nacked on its first attempt and succeeds on the retry.

    dueq serve &                      # http://127.0.0.1:7878
    python3 examples/dueq_example.py  # DUEQ_URL, DUEQ_TOKEN, DUEQ_QUEUE to override

Exits 0 when every task ran as expected, 1 otherwise. Prints one JSON summary line.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

BASE = os.environ.get("DUEQ_URL", "http://127.0.0.1:7878").rstrip("/")
TOKEN = os.environ.get("DUEQ_TOKEN")
QUEUE = os.environ.get("DUEQ_QUEUE", "py-example")


class ApiError(Exception):
    """A non-2xx answer: status plus the {"error": {"code", "message"}} body."""

    def __init__(self, status, body):
        super().__init__(f"{status}: {body}")
        self.status = status
        self.body = body


def call(method, path, body=None, ok=(200, 201)):
    """Sends one request; returns (status, parsed JSON). Raises ApiError unless in `ok`."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if TOKEN:
        req.add_header("Authorization", "Bearer " + TOKEN)
    try:
        with urllib.request.urlopen(req, timeout=90) as res:
            status, raw = res.status, res.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    parsed = json.loads(raw) if raw else None
    if status not in ok:
        raise ApiError(status, parsed)
    return status, parsed


def q(path=""):
    return "/v1/queues/" + urllib.parse.quote(QUEUE, safe="") + path


def key_path(key):
    # business keys may hold any character: encode everything, "/" included
    return q("/keys/" + urllib.parse.quote(key, safe=""))


def enqueue(payload, key=None, delay_ms=None):
    body = {"payload": payload}
    if key is not None:
        body["key"] = key
    if delay_ms is not None:
        body["delay_ms"] = delay_ms
    return call("POST", q("/tasks"), body)[1]


def cancel(key):
    # 200 cancelled, 409 in_progress, 404 not_found: all three are answers, not failures
    return call("DELETE", key_path(key), ok=(200, 404, 409))[1]["outcome"]


def claim(max_tasks=10, wait_ms=1000):
    return call("POST", q("/claim"), {"max": max_tasks, "wait_ms": wait_ms})[1]["tasks"]


def ack(task):
    return call("POST", q(f"/tasks/{task['id']}/ack"), {"lease_token": task["lease_token"]})[1]


def nack(task, error, retry_in_ms=None):
    body = {"lease_token": task["lease_token"], "error": error}
    if retry_in_ms is not None:
        body["retry_in_ms"] = retry_in_ms
    return call("POST", q(f"/tasks/{task['id']}/nack"), body)[1]


def main():
    summary = {}
    # 1. schedule "cancel order 1001 in 30 minutes", then payment arrives: cancel by key
    key = "order:1001:cancel / éx"
    created = enqueue({"order": 1001}, key=key, delay_ms=30 * 60_000)
    summary["enqueued"] = created["created"]
    summary["cancel"] = cancel(key)
    summary["cancel_again"] = cancel(key)

    # 2. three due tasks; one fails on its first attempt
    for n, fail in [(1, False), (2, True), (3, False)]:
        enqueue({"order": n, "fail": fail})

    # 3. work the queue: claim (long-poll), run, ack or nack
    done, nacked = set(), 0
    deadline = time.monotonic() + 30
    while len(done) < 3 and time.monotonic() < deadline:
        for task in claim(max_tasks=10, wait_ms=1000):
            p = task["payload"]
            if p.get("fail") and task["attempt"] == 1:
                nack(task, "simulated failure", retry_in_ms=0)
                nacked += 1
            else:
                ack(task)
                done.add(p["order"])
    summary["acked"] = sorted(done)
    summary["nacked"] = nacked
    print(json.dumps(summary))
    ok = (
        summary["enqueued"] is True
        and summary["cancel"] == "cancelled"
        and summary["cancel_again"] == "not_found"
        and summary["acked"] == [1, 2, 3]
        and nacked == 1
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
