#!/usr/bin/env python3
"""A dueq webhook receiver using only the Python standard library.

`dueq serve` POSTs each due task of a queue with a webhook to this server, signed by the
Standard Webhooks specification. It checks the signature, answers 204 (acknowledged) for a
good one and 401 for a bad one (a failed attempt: dueq retries later, then dead-letters), and
ignores a webhook-id it has already processed (delivery is at-least-once). Any Standard
Webhooks library (`pip install standardwebhooks`) does the same check as `verify` below.

    export DUEQ_WEBHOOK_SECRET=whsec_$(openssl rand -base64 32)
    python3 examples/webhook_receiver.py &               # listens on 127.0.0.1:8080
    dueq webhook set orders http://127.0.0.1:8080/dueq   # --secret defaults to that variable

Environment: DUEQ_WEBHOOK_SECRET (required), PORT (default 8080; 0 = any free port),
STOP_AFTER (stop after this many accepted deliveries and print them as JSON; for tests).
The first line on stdout is the address it listens on; each delivery is logged on stderr.
"""

import base64
import hashlib
import hmac
import json
import os
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer

TOLERANCE_S = 5 * 60  # refuse timestamps older or newer than 5 minutes (replays)


def verify(secret: str, headers, body: bytes, now_s: int) -> bool:
    """True when the webhook-signature header holds a v1 signature of
    "{webhook-id}.{webhook-timestamp}.{body}" under the whsec_ secret and the time is recent."""
    msg_id = headers.get("webhook-id", "")
    ts = headers.get("webhook-timestamp", "")
    if not msg_id or not ts.isdigit() or abs(now_s - int(ts)) > TOLERANCE_S:
        return False
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    expected = "v1," + base64.b64encode(mac).decode()
    # one signature per secret while the sender rotates; compare in constant time
    return any(hmac.compare_digest(expected, sig)
               for sig in headers.get("webhook-signature", "").split(" "))


class Receiver(BaseHTTPRequestHandler):
    secret = ""
    seen = set()  # webhook-ids already processed: use a database in real life
    accepted = []
    stop_after = 0

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if not verify(self.secret, self.headers, body, int(time.time())):
            print(f"refused: bad signature on {self.headers.get('webhook-id')}",
                  file=sys.stderr, flush=True)
            self.send_response(401)
            self.end_headers()
            return
        msg_id = self.headers["webhook-id"]  # "{queue}:{task id}"
        task_id = self.headers["dueq-task-id"]
        if msg_id not in self.seen:
            self.seen.add(msg_id)
            key = self.headers.get("dueq-task-key")  # percent-encoded, absent without a key
            payload = body
            if self.headers.get("Content-Type") == "application/json":
                payload = json.loads(body)
            # ... do the work here ...
            Receiver.accepted.append({
                "id": task_id,
                "key": urllib.parse.unquote(key) if key is not None else None,
                "attempt": int(self.headers["dueq-attempt"]),
                "queue": self.headers["dueq-queue"],
                "payload": payload if isinstance(payload, (dict, list, int, float, str)) else None,
            })
            print(f"accepted task {task_id} attempt {self.headers['dueq-attempt']}: {body[:80]!r}",
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
    Receiver.secret = secret
    stop_after = int(os.environ.get("STOP_AFTER", "0"))
    server = HTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8080"))), Receiver)
    print(f"http://127.0.0.1:{server.server_port}/dueq", flush=True)
    while not stop_after or len(Receiver.accepted) < stop_after:
        server.handle_request()
    print(json.dumps(Receiver.accepted), flush=True)


if __name__ == "__main__":
    main()
