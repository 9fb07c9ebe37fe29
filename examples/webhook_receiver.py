#!/usr/bin/env python3
"""A dueq webhook receiver using only the Python standard library.

`dueq serve` POSTs each due task of a queue with a webhook to this server. It checks the
`Dueq-Signature` header, answers 204 (acknowledged) for a good one and 401 for a bad one (a
failed attempt: dueq retries later, then dead-letters), and ignores a task id it has already
processed (delivery is at-least-once).

    export DUEQ_WEBHOOK_SECRET=$(openssl rand -hex 32)
    python3 examples/webhook_receiver.py &               # listens on 127.0.0.1:8080
    dueq webhook set orders http://127.0.0.1:8080/dueq   # --secret defaults to that variable

Environment: DUEQ_WEBHOOK_SECRET (required), PORT (default 8080; 0 = any free port),
STOP_AFTER (stop after this many accepted deliveries and print them as JSON; for tests).
The first line on stdout is the address it listens on; each delivery is logged on stderr.
"""

import hashlib
import hmac
import json
import os
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer

TOLERANCE_MS = 5 * 60 * 1000  # refuse signatures older or newer than 5 minutes (replays)


def verify(secret: bytes, header: str, body: bytes, now_ms: int) -> bool:
    """True when `header` ("t=<unix ms>,v1=<hex>") signs `body` with `secret` and t is recent."""
    fields = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    t, v1 = fields.get("t", ""), fields.get("v1", "")
    if not t.isdigit() or abs(now_ms - int(t)) > TOLERANCE_MS:
        return False
    expected = hmac.new(secret, t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, v1)  # constant time


class Receiver(BaseHTTPRequestHandler):
    secret = b""
    seen = set()  # task ids already processed: use a database in real life
    accepted = []
    stop_after = 0

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        signature = self.headers.get("Dueq-Signature", "")
        if not verify(self.secret, signature, body, int(time.time() * 1000)):
            print(f"refused: bad signature on task {self.headers.get('Dueq-Task-Id')}",
                  file=sys.stderr, flush=True)
            self.send_response(401)
            self.end_headers()
            return
        task_id = self.headers["Dueq-Task-Id"]
        if task_id not in self.seen:
            self.seen.add(task_id)
            key = self.headers.get("Dueq-Task-Key")  # percent-encoded, absent without a key
            payload = body
            if self.headers.get("Content-Type") == "application/json":
                payload = json.loads(body)
            # ... do the work here ...
            Receiver.accepted.append({
                "id": task_id,
                "key": urllib.parse.unquote(key) if key is not None else None,
                "attempt": int(self.headers["Dueq-Attempt"]),
                "queue": self.headers["Dueq-Queue"],
                "payload": payload if isinstance(payload, (dict, list, int, float, str)) else None,
            })
            print(f"accepted task {task_id} attempt {self.headers['Dueq-Attempt']}: {body[:80]!r}",
                  file=sys.stderr, flush=True)
        else:
            print(f"duplicate of task {task_id}, acknowledged again", file=sys.stderr, flush=True)
        self.send_response(204)  # any 2xx acknowledges
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    secret = os.environ.get("DUEQ_WEBHOOK_SECRET")
    if not secret:
        sys.exit("set DUEQ_WEBHOOK_SECRET")
    Receiver.secret = secret.encode()
    stop_after = int(os.environ.get("STOP_AFTER", "0"))
    server = HTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8080"))), Receiver)
    print(f"http://127.0.0.1:{server.server_port}/dueq", flush=True)
    while not stop_after or len(Receiver.accepted) < stop_after:
        server.handle_request()
    print(json.dumps(Receiver.accepted), flush=True)


if __name__ == "__main__":
    main()
