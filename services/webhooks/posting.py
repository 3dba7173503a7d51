"""One attempt's HTTP POST, to the address checked for it (targets.py): the connection
goes to that IP while the request keeps the URL's Host and TLS server name, so a resolver
that changes its answer between the check and the connection (DNS rebinding) cannot steer
it elsewhere. Redirects are not followed (one is a failed attempt, recorded), the answer
is read no further than ANSWER_BYTES, and no proxy from the environment is used."""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

from services.webhooks.targets import Target

ANSWER_BYTES = 2048  # of an answer's body read and kept (the deliveries' listing shows it)
ERROR_CHARS = 500


@dataclass(frozen=True)
class Outcome:
    status_code: int | None  # None: no answer
    answer: str
    error: str
    duration_ms: int

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def _pinned_url(target: Target) -> str:
    """The URL with its host replaced by the checked address."""
    parts = urlsplit(target.url)
    host = str(target.address)
    if isinstance(target.address, ipaddress.IPv6Address):
        host = f"[{host}]"
    return urlunsplit((parts.scheme, f"{host}:{target.port}", parts.path or "/", parts.query, ""))


def _host_header(target: Target) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    default = 443 if target.scheme == "https" else 80
    return host if target.port == default else f"{host}:{target.port}"


def post(client: httpx.Client, target: Target, headers: dict[str, str], body: bytes) -> Outcome:
    """POST `body` to `target`; what came back, never raising for the network's faults."""
    started = time.monotonic()
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    status: int | None = None
    answer, error = "", ""
    try:
        request = client.build_request(
            "POST",
            _pinned_url(target),
            headers={**headers, "Host": _host_header(target)},
            content=body,
            extensions=extensions,
        )
        response = client.send(request, stream=True)
        try:
            status = response.status_code
            answer = _read_some(response, started + 2 * (client.timeout.read or 60.0))
            if response.is_redirect:
                where = response.headers.get("location", "")[:200]
                error = f"answered a redirect ({status} to {where!r}); redirects are not followed"
            elif not 200 <= status < 300:
                error = f"answered {status}"
        finally:
            response.close()
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]
    return Outcome(status, answer, error, round((time.monotonic() - started) * 1000))


def _read_some(response: httpx.Response, deadline: float) -> str:
    """The start of the answer's body: at most ANSWER_BYTES, and only what came before
    `deadline` (a receiver trickling a byte at a time does not hold the thread)."""
    kept = b""
    for chunk in response.iter_raw():
        kept += chunk
        if len(kept) >= ANSWER_BYTES or time.monotonic() > deadline:
            break
    return kept[:ANSWER_BYTES].decode("utf-8", "replace")


def new_client(timeout: float) -> httpx.Client:
    """The sender's client: no redirects followed, no proxy or .netrc from the environment."""
    return httpx.Client(timeout=httpx.Timeout(timeout), follow_redirects=False, trust_env=False)
