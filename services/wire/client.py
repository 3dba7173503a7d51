"""The Redis client factory, and the writes every zone makes to the events stream.

One URL says how to reach Redis, for every client in every process (redis-py's
clients, Celery's broker, the api's SSE readers): `redis://[:PASSWORD@]HOST:PORT/DB`,
or `rediss://` for TLS, with `ssl_ca_certs`, `ssl_cert_reqs`, `ssl_certfile` and
`ssl_keyfile` as query parameters (docs/redis.md).
"""

from __future__ import annotations

import ssl
import threading
import time
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from services.settings import get_settings
from services.wire.events import Event, NodeEvent, Wake
from services.wire.keys import EVENTS_STREAM, STREAM_MAXLEN
from services.wire.signing import sign_event


def connect(
    url: str,
    *,
    retries: int = 2,
    socket_timeout: float = 10.0,
    decode_responses: bool = True,
    health_check_interval: int = 30,
) -> redis.Redis:
    """A Redis client (lazy: it connects on first use) that gives up within seconds.

    Bounded retries: a caller (the agent's lease, the scheduler's lock) must learn
    quickly that Redis is gone, not after redis-py's default retry budget; a replica's
    metric reporter passes `retries=0`, since its own loop retries between steps.
    """
    return redis.Redis.from_url(
        url,
        decode_responses=decode_responses,
        health_check_interval=health_check_interval,
        socket_timeout=socket_timeout,
        socket_connect_timeout=2,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries),
    )


# The TLS parameters a `rediss://` URL may carry (redis-py's names, which kombu shares).
TLS_PARAMETERS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
_CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


# How a Redis that wants a password (or another one) answers, whichever the protocol.
_AUTH_ERRORS = ("NOAUTH", "NOPERM", "WRONGPASS", "HELLO must be called")


class RedisUnavailable(RuntimeError):
    """Redis could not be reached or refused this process's credentials."""


def redacted(url: str) -> str:
    """The URL without its password, fit for a log line or an error message."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def celery_broker(url: str) -> tuple[str, dict[str, Any] | None]:
    """The broker URL and `broker_use_ssl` for Celery.

    kombu reads no TLS parameters from a `rediss://` URL: without `broker_use_ssl` it
    would connect without checking the server's certificate. The parameters move from
    the URL into that dict, and the certificate is required unless the URL says not.
    """
    parts = urlsplit(url)
    if parts.scheme != "rediss":
        return url, None
    query = parse_qsl(parts.query, keep_blank_values=True)
    tls: dict[str, Any] = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    for name, value in query:
        if name == "ssl_cert_reqs":
            if value.lower() not in _CERT_REQS:
                raise ValueError(
                    f"ssl_cert_reqs={value!r} in the Redis URL: use none, optional or required"
                )
            tls[name] = _CERT_REQS[value.lower()]
        elif name in TLS_PARAMETERS:
            tls[name] = value
    rest = [(name, value) for name, value in query if name not in TLS_PARAMETERS]
    return urlunsplit(parts._replace(query=urlencode(rest))), tls


def check_redis(client: redis.Redis, url: str, wait: float = 30.0) -> None:
    """Fail a process's start-up with one clear line if Redis refuses its password, or
    stays unreachable for `wait` seconds, rather than with a traceback later on.

    Raises:
        RedisUnavailable: saying which URL (password hidden) and why.
    """
    where = redacted(url)
    deadline = time.monotonic() + wait
    while True:
        try:
            client.ping()
            return
        except (redis.AuthenticationError, redis.ResponseError) as exc:
            refused = isinstance(exc, redis.AuthenticationError) or str(exc).startswith(
                _AUTH_ERRORS
            )
            if not refused:
                raise RedisUnavailable(f"Redis at {where} answered an error: {exc}") from exc
            if urlsplit(url).password is None:
                raise RedisUnavailable(
                    f"Redis at {where} requires a password: give it in "
                    "COHORT_REDIS_URL (redis://:PASSWORD@HOST:PORT/DB)"
                ) from exc
            raise RedisUnavailable(
                f"Redis at {where} refused the credentials in COHORT_REDIS_URL: {exc}"
            ) from exc
        except redis.RedisError as exc:
            if isinstance(exc.__cause__ or exc.__context__, ssl.SSLError) or "SSL" in str(exc):
                # A certificate that does not check out will not on the next try either.
                raise RedisUnavailable(
                    f"TLS with Redis at {where} failed (the CA in "
                    f"ssl_ca_certs, the server's certificate?): {exc}"
                ) from exc
            # Unreachable: Redis may still be starting.
            if time.monotonic() >= deadline:
                raise RedisUnavailable(f"cannot reach Redis at {where}: {exc}") from exc
            time.sleep(0.5)


@lru_cache(maxsize=4)
def get_redis(url: str | None = None) -> redis.Redis:
    """This process's client for the configured Redis (decoded strings)."""
    return connect(url or get_settings().redis_url)


def publish_event(client: redis.Redis, event: Event) -> None:
    """Append one event to the events stream (unsigned: a `wake` only)."""
    client.xadd(EVENTS_STREAM, event.entry(), maxlen=STREAM_MAXLEN, approximate=True)


def publish_node_event(client: redis.Redis, event: NodeEvent, node_key: str) -> None:
    """Append one of a node's events, signed with its key, to the events stream."""
    entry = event.entry()
    entry["sig"] = sign_event(node_key, event.node_id, event.KIND, str(entry["data"]))
    client.xadd(EVENTS_STREAM, entry, maxlen=STREAM_MAXLEN, approximate=True)


# A burst of submissions asks for a pass per job; one pass reads the whole queue, so the
# wakes a process sends are coalesced: at most one per window, the first at once.
WAKE_WINDOW = 0.05  # seconds


class _WakeCoalescer:
    """Sends `wake` at most once per WAKE_WINDOW per process, never dropping one.

    A wake asked for within the window of the last one sent is deferred to the window's
    end (one timer, shared by every request that arrives meanwhile), so each request is
    followed by a wake sent after it: its change, committed before it asked, is in SQL
    when the scheduler reads. A `wake` carries nothing, so one stands for many.
    """

    def __init__(self, window: float) -> None:
        self.window = window
        self.lock = threading.Lock()
        self.last_sent = -float("inf")
        self.timer: threading.Timer | None = None

    def request(self, client: redis.Redis) -> None:
        with self.lock:
            if self.timer is not None:
                return  # the pending wake, sent later than this request, covers it
            if self._defer(client):
                return
            self.last_sent = time.monotonic()  # a request while it is sent is deferred
        self._send(client)

    def _defer(self, client: redis.Redis) -> bool:
        """With the lock held: arm the timer for the window's end, unless it is over."""
        wait = self.last_sent + self.window - time.monotonic()
        if wait <= 0:
            return False
        self.timer = threading.Timer(wait, self._deferred, args=(client,))
        self.timer.daemon = True
        self.timer.start()
        return True

    def _deferred(self, client: redis.Redis) -> None:
        with self.lock:
            self.timer = None
            # The window runs from the end of the last send, which may have ended after
            # this timer was armed (a request made while it was being sent).
            if self._defer(client):
                return
            self.last_sent = time.monotonic()
        self._send(client)

    def _send(self, client: redis.Redis) -> None:
        _send_wake(client)
        with self.lock:
            # From the send's end: the next append comes a whole window after this one,
            # however long this one took (timed from its start, two appends came closer
            # than the window by the first one's own time).
            self.last_sent = time.monotonic()


def _send_wake(client: redis.Redis) -> None:
    # The scheduler blocks reading the events stream, so an event wakes it at once.
    try:
        publish_event(client, Wake())
    except redis.RedisError:
        pass  # the scheduler's timer will get there; SQL already holds the change


_wakes = _WakeCoalescer(WAKE_WINDOW)


def wake_scheduler(client: redis.Redis) -> None:
    """Ask the scheduler for a pass soon rather than at its next tick (best effort): at
    once, or at the end of the current coalescing window if a wake was just sent."""
    _wakes.request(client)
