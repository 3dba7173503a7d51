"""Failed dashboard logins counted per client address: past COHORT_LOGIN_MAX_FAILURES in
COHORT_LOGIN_FAILURE_WINDOW seconds, every login from that address is refused (429,
`Retry-After`) until the window ends, so tokens cannot be guessed at speed.

The count lives in Redis, so every api process sees the same one and a restart does not
reset it. A fixed window: the first failure starts it, and it ends on its own (a key with
a time to live). A success does not clear the count: a caller holding one valid token
could otherwise wipe it between guesses. The address is the one uvicorn reports, which is
the proxy's `X-Forwarded-For` only for proxies listed in FORWARDED_ALLOW_IPS.

While Redis does not answer, each api process counts in its own memory instead (the same
allowance and window, per process): the dashboard stays up without Redis, and guessing
does not speed up while it is away.
"""

from __future__ import annotations

import logging
import threading
import time

import redis

from services.exceptions import TooManyRequests
from services.settings import Settings
from services.wire.keys import login_failures_key

log = logging.getLogger(__name__)


class LoginThrottled(TooManyRequests):
    """Too many failed logins from one address."""


class _LocalCounts:
    """Failed logins per address in this process, for while Redis does not answer: fixed
    windows as in Redis, at most MAX_ADDRESSES of them (the oldest dropped first)."""

    MAX_ADDRESSES = 10_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._windows: dict[str, tuple[float, int]] = {}  # address -> (ends at, count)

    def _live(self, address: str, now: float) -> tuple[float, int] | None:
        window = self._windows.get(address)
        if window is not None and window[0] <= now:
            del self._windows[address]
            return None
        return window

    def wait(self, address: str, limit: int) -> int | None:
        """Seconds `address` must wait, if it has used up its failures."""
        now = time.monotonic()
        with self._lock:
            window = self._live(address, now)
        if window is None or window[1] < limit:
            return None
        return max(int(window[0] - now), 1)

    def count(self, address: str, window_seconds: float) -> None:
        now = time.monotonic()
        with self._lock:
            window = self._live(address, now)
            ends, count = window if window is not None else (now + window_seconds, 0)
            self._windows.pop(address, None)  # re-inserted last: the newest
            self._windows[address] = (ends, count + 1)
            while len(self._windows) > self.MAX_ADDRESSES:
                del self._windows[next(iter(self._windows))]


LOCAL = _LocalCounts()


def check_login_allowed(client: redis.Redis, settings: Settings, address: str) -> None:
    """Raise LoginThrottled when `address` has used up its failed logins for now, as
    Redis counts them, or this process while Redis does not answer."""
    key = login_failures_key(address)
    wait: int | None = None
    try:
        pipe = client.pipeline(transaction=False)
        pipe.get(key)
        pipe.ttl(key)
        count, ttl = pipe.execute()
        if count is not None and int(count) >= settings.LOGIN_MAX_FAILURES:
            wait = max(int(ttl), 1)
    except redis.RedisError:
        log.warning("login throttle: Redis did not answer; counting in this process", exc_info=True)
    local = LOCAL.wait(address, settings.LOGIN_MAX_FAILURES)
    if local is not None:
        wait = max(wait or 0, local)
    if wait is not None:
        raise LoginThrottled(
            f"too many failed logins from {address}: try again in {wait} s", retry_after=wait
        )


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
        log.warning("login throttle: Redis did not answer; counting in this process", exc_info=True)
        LOCAL.count(address, settings.LOGIN_FAILURE_WINDOW)
