"""`cohort health api|scheduler|agent`: a container healthcheck for each service.

Exit 0 when the service does its work, 1 when it does not, with one line saying
why. Each reads the same COHORT_* settings as the service it checks:

- api: its /readyz answers 200 (SQL and Redis reachable from the api);
- scheduler: a leader ran a pass lately (it records the time of each pass in Redis,
  services/wire/keys.py SCHEDULER_PASS). With several scheduler processes only one
  leads, so this says "the cluster is being scheduled", whichever process leads;
- agent: this node's (COHORT_NODE_ID) heartbeat in Redis is younger than NODE_TIMEOUT,
  the age past which the scheduler declares the node lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated

import httpx
import redis
import typer

from services.settings import Settings, get_settings
from services.wire.client import connect, redacted
from services.wire.events import NodeHeartbeat
from services.wire.keys import NODES_HASH, SCHEDULER_PASS
from services.wire.signing import Sealed

# A healthcheck must answer within the container engine's timeout (compose: 30 s).
TIMEOUT = 5.0


class Service(StrEnum):
    api = "api"
    scheduler = "scheduler"
    agent = "agent"


class Unhealthy(Exception):
    """The service is not doing its work; the message says why."""


def scheduler_max_age(settings: Settings) -> float:
    """How old the last pass may be: a pass runs at least every SCHEDULER_INTERVAL, and a
    new leader takes over within the lock's TTL of the old one dying."""
    return max(3 * settings.SCHEDULER_LOCK_TTL, 5 * settings.SCHEDULER_INTERVAL)


def api_url(settings: Settings) -> str:
    """Where the api listens, as seen from its own host (a wildcard bind is local too)."""
    host = settings.API_HOST
    if host in ("", "0.0.0.0"):  # noqa: S104 - read, not bound
        host = "127.0.0.1"
    elif host == "::":
        host = "[::1]"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.API_PORT}"


def check_api(settings: Settings) -> str:
    url = f"{api_url(settings)}/readyz"
    try:
        response = httpx.get(url, timeout=TIMEOUT)
    except httpx.HTTPError as exc:
        raise Unhealthy(f"api: no answer from {url}: {exc}") from exc
    if response.status_code != 200:
        raise Unhealthy(f"api: {url} answered {response.status_code}: {response.text[:200]}")
    return f"api: ready at {url}"


def check_scheduler(
    settings: Settings, client: redis.Redis, now: float, max_age: float | None = None
) -> str:
    raw = client.get(SCHEDULER_PASS)
    if raw is None:
        raise Unhealthy("scheduler: no scheduling pass recorded in Redis yet")
    try:
        age = now - float(raw)
    except ValueError as exc:
        raise Unhealthy(f"scheduler: unreadable last pass time {raw!r}") from exc
    limit = max_age if max_age is not None else scheduler_max_age(settings)
    if age > limit:
        raise Unhealthy(f"scheduler: last pass {age:.0f}s ago (more than {limit:.0f}s)")
    return f"scheduler: last pass {max(age, 0.0):.1f}s ago"


def check_agent(settings: Settings, client: redis.Redis, now: float) -> str:
    node_id = settings.node_id
    raw = client.hget(NODES_HASH, node_id)
    if raw is None:
        raise Unhealthy(f"agent: no heartbeat from node {node_id!r} in Redis")
    try:
        # Its own agent's beat: the scheduler checks the signature, this only its age.
        beat = NodeHeartbeat.decode(Sealed.decode(raw).body)
    except ValueError as exc:  # a WireError, or a malformed payload
        raise Unhealthy(f"agent: unreadable heartbeat of node {node_id!r}: {exc}") from exc
    age = now - beat.ts
    if age > settings.NODE_TIMEOUT:
        raise Unhealthy(
            f"agent: node {node_id!r} last beat {age:.0f}s ago "
            f"(more than NODE_TIMEOUT={settings.NODE_TIMEOUT:.0f}s)"
        )
    return f"agent: node {node_id!r} beat {max(age, 0.0):.1f}s ago"


def check(
    service: Service,
    settings: Settings,
    max_age: float | None = None,
    clock: Callable[[], float] = time.time,
) -> str:
    """The one line saying the service is healthy.

    Raises:
        Unhealthy: saying why it is not.
    """
    if service is Service.api:
        return check_api(settings)
    client = connect(settings.redis_url, retries=0, socket_timeout=TIMEOUT)
    try:
        if service is Service.scheduler:
            return check_scheduler(settings, client, clock(), max_age)
        return check_agent(settings, client, clock())
    except redis.RedisError as exc:
        raise Unhealthy(
            f"{service}: cannot read Redis at {redacted(settings.redis_url)}: {exc}"
        ) from exc
    finally:
        client.close()


def health(
    service: Annotated[Service, typer.Argument(help="the service to check")],
    max_age: Annotated[
        float | None,
        typer.Option(
            help="scheduler: how old its last pass may be, seconds "
            "(default: 30, or 5 scheduler intervals if longer)"
        ),
    ] = None,
) -> None:
    """Exit 0 if SERVICE (api, scheduler, agent) works, 1 if not, with one line saying why."""
    try:
        line = check(service, get_settings(), max_age)
    except Unhealthy as exc:
        typer.echo(f"unhealthy: {exc}")
        raise typer.Exit(1) from None
    typer.echo(f"healthy: {line}")
