"""The webhook signature verifier, against dueq's own test vector."""

from dueq import sign, verify_signature

SECRET = "whsec_test_secret_1"
BODY = b'{"order":42}'
# the vector of crates/dueq-server/src/push/deliver.rs
HEADER = "t=1700000000000,v1=a8c00e10d5a7c6eb178a1b1327642952af1f418c7162d73683c2b72b1fddcecb"


def test_known_vector() -> None:
    assert sign(SECRET, 1_700_000_000_000, BODY) == HEADER
    assert verify_signature(SECRET, HEADER, BODY, now_ms=1_700_000_000_000)
    assert verify_signature(SECRET.encode(), HEADER, BODY, now_ms=1_700_000_100_000)


def test_refusals() -> None:
    now = 1_700_000_000_000
    assert not verify_signature(SECRET, HEADER, BODY + b" ", now_ms=now)
    assert not verify_signature("another-secret-16", HEADER, BODY, now_ms=now)
    assert not verify_signature(SECRET, HEADER, BODY, now_ms=now + 300_001)  # replayed late
    assert not verify_signature(SECRET, None, BODY, now_ms=now)
    assert not verify_signature(SECRET, "t=abc,v1=00", BODY, now_ms=now)
    assert not verify_signature(SECRET, HEADER.replace("v1=a8", "v1=b8"), BODY, now_ms=now)


def test_rotation_accepts_either_secret() -> None:
    assert verify_signature(["new-secret-000000", SECRET], HEADER, BODY, now_ms=1_700_000_000_000)
