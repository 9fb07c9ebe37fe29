"""Checking the ``Dueq-Signature`` header of a push delivery (webhook).

The header is ``t=<Unix ms>,v1=<64 hex digits>``: HMAC-SHA256 keyed with the webhook's
secret over the ASCII timestamp, a ``.``, and the raw request body. Verify over the bytes
received, before any JSON parsing; answer 401 when it fails (the delivery counts as a
failed attempt and is retried).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Optional, Sequence, Union

__all__ = ["SIGNATURE_HEADER", "sign", "verify_signature"]

SIGNATURE_HEADER = "Dueq-Signature"
"""The header that carries the signature."""

Secret = Union[str, bytes]


def _bytes(s: Secret) -> bytes:
    return s.encode() if isinstance(s, str) else s


def sign(secret: Secret, timestamp_ms: int, body: bytes) -> str:
    """The header value dueq sends for ``body`` at ``timestamp_ms`` (for tests)."""
    mac = hmac.new(_bytes(secret), str(timestamp_ms).encode() + b"." + body, hashlib.sha256)
    return f"t={timestamp_ms},v1={mac.hexdigest()}"


def verify_signature(
    secret: Union[Secret, Sequence[Secret]],
    header: Optional[str],
    body: bytes,
    *,
    tolerance_ms: int = 300_000,
    now_ms: Optional[int] = None,
) -> bool:
    """Whether ``header`` (the ``Dueq-Signature`` value) signs ``body`` with ``secret`` (or
    with any of several secrets, while rotating) and its timestamp is within
    ``tolerance_ms`` of ``now_ms`` (default: this host's clock), so a captured request
    cannot be replayed later. Compares in constant time."""
    if not header:
        return False
    fields = dict(p.strip().split("=", 1) for p in header.split(",") if "=" in p)
    t, v1 = fields.get("t", ""), fields.get("v1", "")
    if not t.isdigit() or len(v1) != 64:
        return False
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if abs(now - int(t)) > tolerance_ms:
        return False
    secrets = [secret] if isinstance(secret, (str, bytes)) else list(secret)
    ok = False
    for s in secrets:
        expected = hmac.new(_bytes(s), t.encode() + b"." + body, hashlib.sha256).hexdigest()
        ok |= hmac.compare_digest(expected, v1.lower())
    return ok
