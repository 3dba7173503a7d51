"""Failed dashboard logins counted per client address: past COHORT_LOGIN_MAX_FAILURES in
COHORT_LOGIN_FAILURE_WINDOW seconds, every login from that address is refused (429,
`Retry-After`) until the window ends, so tokens cannot be guessed at speed.

The count lives in Redis, so every api process sees the same one and a restart does not
reset it. A fixed window: the first failure starts it, and it ends on its own (a key with
a time to live). A success does not clear the count: a caller holding one valid token
could otherwise wipe it between guesses. The address is the one uvicorn reports, which is
the proxy's `X-Forwarded-For` only for proxies listed in FORWARDED_ALLOW_IPS.
"""

from __future__ import annotations

import logging

import redis

from services.exceptions import TooManyRequests
from services.settings import Settings
from services.wire.keys import login_failures_key

log = logging.getLogger(__name__)


class LoginThrottled(TooManyRequests):
    """Too many failed logins from one address."""


def check_login_allowed(client: redis.Redis, settings: Settings, address: str) -> None:
    """Raise LoginThrottled when `address` has used up its failed logins for now.

    A Redis that does not answer lets the login through: the token check still holds,
    and the dashboard should not go down with Redis.
    """
    key = login_failures_key(address)
    try:
        pipe = client.pipeline(transaction=False)
        pipe.get(key)
        pipe.ttl(key)
        count, ttl = pipe.execute()
    except redis.RedisError:
        log.warning("login throttle: Redis did not answer; not counting", exc_info=True)
        return
    if count is not None and int(count) >= settings.LOGIN_MAX_FAILURES:
        wait = max(int(ttl), 1)
        raise LoginThrottled(f"too many failed logins from {address}: try again in {wait} s",
                             retry_after=wait)


def record_failed_login(client: redis.Redis, settings: Settings, address: str) -> None:
    """Count one failed login from `address` (starting a window if none is running)."""
    key = login_failures_key(address)
    try:
        pipe = client.pipeline(transaction=True)
        # SET NX EX then INCR, in one transaction: the key never exists without its time
        # to live, whatever happens between the two.
        pipe.set(key, 0, ex=settings.LOGIN_FAILURE_WINDOW, nx=True)
        pipe.incr(key)
        pipe.execute()
    except redis.RedisError:
        log.warning("login throttle: Redis did not answer; not counting", exc_info=True)
