"""A delivery's signature headers, as Stripe and GitHub sign theirs.

    Cohort-Webhook-Id:        the delivery's id (the same on every retry)
    Cohort-Webhook-Timestamp: Unix seconds when this attempt was signed
    Cohort-Webhook-Signature: v1=<hex HMAC-SHA256(secret, f"{timestamp}.{body}")>

The timestamp is inside the signed text, so a receiver that refuses old timestamps
refuses a replayed request; docs/webhooks.md shows the receiver's check.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

SCHEME = "v1"
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A webhook's signing secret: 32 random bytes, hex, with a recognisable prefix."""
    return SECRET_PREFIX + secrets.token_hex(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The Cohort-Webhook-Signature value of `body` signed at `timestamp`."""
    signed = f"{timestamp}.".encode() + body
    return f"{SCHEME}=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def headers(*, secret: str, delivery_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """Every header of one attempt but Host."""
    return {
        "Content-Type": "application/json",
        "User-Agent": "Cohort-Webhooks/1",
        "Cohort-Webhook-Id": delivery_id,
        "Cohort-Webhook-Timestamp": str(timestamp),
        "Cohort-Webhook-Signature": signature(secret, timestamp, body),
    }
