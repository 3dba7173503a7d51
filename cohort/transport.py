"""What the sync and async clients share about HTTP: the connection's settings, when to
send a request again (429 and 503, after `Retry-After`), and how an answer becomes a
value or an ApiError. Each client only does the sending (cohort/client.py,
cohort/async_client.py)."""

from __future__ import annotations

import datetime as dt
import email.utils
from typing import Any, TypeVar

import httpx

from cohort.calls import Call, Streamed
from cohort.config import Credentials, resolve
from cohort.errors import ApiError, unauthorized_hint

T = TypeVar("T")
H = TypeVar("H", httpx.Client, httpx.AsyncClient)

RETRY_STATUSES = (429, 503)
MAX_RETRY_WAIT = 60.0  # a longer Retry-After is capped (a client is not parked for an hour)
DEFAULT_RETRY_WAIT = 1.0  # a 429 or 503 that names no time


def client_settings(
    url: str | None, token: str | None, timeout: float
) -> tuple[Credentials, dict[str, Any]]:
    """Where to connect (cohort/config.py) and the httpx client's arguments."""
    found = resolve(url, token)
    headers = {"Authorization": f"Bearer {found.token}"} if found.token else {}
    return found, {"base_url": found.url, "headers": headers, "timeout": timeout}


def retry_wait(response: httpx.Response, call: Call[Any], tries_left: int) -> float | None:
    """Seconds to wait before sending `call` again, or None: answer as it is. A 429 was
    refused before it ran; a 503 may have run only for a call safe to repeat."""
    if tries_left <= 0 or response.status_code not in RETRY_STATUSES:
        return None
    if response.status_code == 503 and not call.repeatable:
        return None
    return min(parse_retry_after(response.headers.get("retry-after")), MAX_RETRY_WAIT)


def parse_retry_after(value: str | None, now: dt.datetime | None = None) -> float:
    """`Retry-After` as seconds: a number of seconds, or an HTTP date (RFC 9110)."""
    if not value:
        return DEFAULT_RETRY_WAIT
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return DEFAULT_RETRY_WAIT
    now = now or dt.datetime.now(dt.UTC)
    return max(0.0, (when - now).total_seconds())


def request_args(call: Call[Any]) -> dict[str, Any]:
    args: dict[str, Any] = {"params": call.params or None, "headers": call.headers or None}
    if call.json is not None:
        args["json"] = call.json
    if call.timeout is not None:
        args["timeout"] = call.timeout
    return args


def open_stream(http: H, call: Streamed) -> Any:
    """`http.stream(...)` of the call: a context manager, async for an httpx.AsyncClient."""
    timeout = httpx.Timeout(call.connect_timeout, read=call.read_timeout)
    return http.stream("GET", call.path, params=call.params, headers=call.headers, timeout=timeout)


def error_of(response: httpx.Response, token_source: str | None) -> ApiError:
    """The ApiError an error answer is (its JSON body, else its text)."""
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    hint = ""
    if response.status_code == 401 and token_source is not None:
        hint = unauthorized_hint(token_source)
    return ApiError(response.status_code, body, hint)


def answer(call: Call[T], response: httpx.Response, token_source: str | None) -> T:
    """The call's typed answer, or its ApiError raised."""
    if response.status_code >= 400:
        raise error_of(response, token_source)
    return call.answer(None if response.status_code == 204 else response.json())
