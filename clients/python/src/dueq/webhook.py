"""Checking a push delivery (webhook) by the Standard Webhooks specification.

dueq signs each delivery with the queue's ``whsec_`` secret: ``webhook-signature`` holds
``v1,`` and the base64 of HMAC-SHA256 over ``{webhook-id}.{webhook-timestamp}.{body}``,
one such entry per secret while a secret change lasts. Verify over the raw bytes received,
before any JSON parsing, and answer 401 when it fails (the delivery counts as a failed attempt
and is retried). Any Standard Webhooks library gives the same answer.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from typing import Mapping, Optional, Sequence, Union

__all__ = [
    "WEBHOOK_ID_HEADER",
    "WEBHOOK_SIGNATURE_HEADER",
    "WEBHOOK_TIMESTAMP_HEADER",
    "sign_webhook",
    "verify_webhook",
]

WEBHOOK_ID_HEADER = "webhook-id"
"""The message id, ``{queue}:{task id}``: the same on every attempt of a task."""
WEBHOOK_TIMESTAMP_HEADER = "webhook-timestamp"
"""When the attempt started, Unix seconds."""
WEBHOOK_SIGNATURE_HEADER = "webhook-signature"
"""Space-separated ``v1,<base64>`` signatures."""

Secret = Union[str, bytes]
"""A ``whsec_`` secret as dueq gives it, or the raw key bytes."""


def _key(secret: Secret) -> bytes:
    if isinstance(secret, bytes):
        return secret
    return base64.b64decode(secret.removeprefix("whsec_"))


def _header(headers: Mapping[str, str], name: str) -> Optional[str]:
    """A header by name in any case, from a dict, ``email.message.Message`` or similar."""
    value = headers.get(name)
    if value is None:
        for k, v in headers.items():
            if k.lower() == name:
                return v
    return value


def sign_webhook(secret: Secret, msg_id: str, timestamp_s: int, body: bytes) -> str:
    """The ``webhook-signature`` entry dueq sends for ``body`` (for tests)."""
    mac = hmac.new(_key(secret), f"{msg_id}.{timestamp_s}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def verify_webhook(
    secret: Union[Secret, Sequence[Secret]],
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_s: int = 300,
    now_s: Optional[int] = None,
) -> bool:
    """Whether ``headers`` carry a signature of ``body`` under ``secret`` (or under any of
    several secrets, while you rotate) and a timestamp within ``tolerance_s`` of ``now_s``
    (default: this host's clock), so a captured request cannot be replayed later. Header
    names are matched in any case. Compares in constant time."""
    msg_id = _header(headers, WEBHOOK_ID_HEADER)
    ts = _header(headers, WEBHOOK_TIMESTAMP_HEADER) or ""
    given = (_header(headers, WEBHOOK_SIGNATURE_HEADER) or "").split()
    if not msg_id or not ts.isdigit() or not given:
        return False
    now = int(time.time()) if now_s is None else now_s
    if abs(now - int(ts)) > tolerance_s:
        return False
    secrets = [secret] if isinstance(secret, (str, bytes)) else list(secret)
    ok = False
    for s in secrets:
        try:
            expected = sign_webhook(s, msg_id, int(ts), body)
        except ValueError:  # not base64: a secret that cannot have signed anything
            continue
        for g in given:
            ok |= hmac.compare_digest(expected, g)
    return ok
