"""The webhook verifier: dueq's own test vector, and the Standard Webhooks library's answer."""

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Dict, List, Tuple

import pytest
import standardwebhooks

import dueq
from conftest import Server, wait_until
from dueq import sign_webhook, verify_webhook

KEY = b"0123456789abcdef01234567"
SECRET = "whsec_" + base64.b64encode(KEY).decode()
BODY = b'{"order":42}'
ID = "q:000000000001"
TS = 1_700_000_000
# the vector of crates/dueq-server/src/push/deliver.rs
SIGNATURE = "v1,pL9loRcmkWmcPkURAea0vfCiOLha5XW5WiUsTHSxQn8="
HEADERS = {"webhook-id": ID, "webhook-timestamp": str(TS), "webhook-signature": SIGNATURE}


def test_known_vector() -> None:
    assert sign_webhook(SECRET, ID, TS, BODY) == SIGNATURE
    assert sign_webhook(KEY, ID, TS, BODY) == SIGNATURE
    assert verify_webhook(SECRET, HEADERS, BODY, now_s=TS)
    assert verify_webhook(KEY, HEADERS, BODY, now_s=TS + 100)
    # header names in any case
    upper = {k.upper(): v for k, v in HEADERS.items()}
    assert verify_webhook(SECRET, upper, BODY, now_s=TS)


def test_refusals() -> None:
    other = "whsec_" + base64.b64encode(b"x" * 24).decode()
    assert not verify_webhook(SECRET, HEADERS, BODY + b" ", now_s=TS)
    assert not verify_webhook(other, HEADERS, BODY, now_s=TS)
    assert not verify_webhook(SECRET, HEADERS, BODY, now_s=TS + 301)  # replayed late
    assert not verify_webhook(SECRET, {}, BODY, now_s=TS)
    assert not verify_webhook(SECRET, {**HEADERS, "webhook-timestamp": "abc"}, BODY, now_s=TS)
    # the id is signed: a swapped id does not verify
    assert not verify_webhook(SECRET, {**HEADERS, "webhook-id": "q:000000000002"}, BODY, now_s=TS)
    assert not verify_webhook("whsec_not base64!", HEADERS, BODY, now_s=TS)


def test_rotation_accepts_either_secret_and_either_signature() -> None:
    other = "whsec_" + base64.b64encode(b"y" * 32).decode()
    assert verify_webhook([other, SECRET], HEADERS, BODY, now_s=TS)
    two = {**HEADERS, "webhook-signature": sign_webhook(other, ID, TS, BODY) + " " + SIGNATURE}
    assert verify_webhook(SECRET, two, BODY, now_s=TS)
    assert verify_webhook(other, two, BODY, now_s=TS)


def test_the_standard_webhooks_library_agrees() -> None:
    wh = standardwebhooks.Webhook(SECRET)
    now = int(time.time())
    headers = {**HEADERS, "webhook-timestamp": str(now),
               "webhook-signature": sign_webhook(SECRET, ID, now, BODY)}  # fmt: skip
    wh.verify(BODY, headers)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        wh.verify(BODY, {**headers, "webhook-id": "q:000000000002"})


def test_a_real_delivery_verifies_with_the_standard_webhooks_library(
    server: Server, queue: dueq.Queue
) -> None:
    got: List[Tuple[Dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            got.append(({k: v for k, v in self.headers.items()}, body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    receiver = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        secret = queue.set_webhook(f"http://127.0.0.1:{receiver.server_port}/hook").secret
        assert secret is not None
        task = queue.enqueue({"order": 42}, key="order:42:cancel")
        wait_until(lambda: got, what="the delivery")
        headers, body = got[0]
        assert json.loads(body) == {"order": 42}
        assert headers["webhook-id"] == f"{queue.name}:{task.id}"
        standardwebhooks.Webhook(secret).verify(body, headers)
        assert verify_webhook(secret, headers, body)
        with pytest.raises(standardwebhooks.WebhookVerificationError):
            standardwebhooks.Webhook(secret).verify(body + b" ", headers)
    finally:
        receiver.shutdown()
