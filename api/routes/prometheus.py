"""`GET /metrics`: the service's own figures in the Prometheus text format, for a scraper
holding COHORT_METRICS_TOKEN (off without one: the figures tell every project's activity)."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from api.deps import SettingsDep
from api.openapi import errors
from services.exceptions import CohortError, NotFound, Unauthorized
from services.telemetry.prometheus import ServiceCollector
from services.wire.client import get_redis

router = APIRouter(tags=["health"])


class MetricsOff(NotFound):
    """/metrics while COHORT_METRICS_TOKEN is unset: 404, with what to do about it."""

    def __init__(self) -> None:
        CohortError.__init__(
            self,
            "/metrics is off: set COHORT_METRICS_TOKEN on the api "
            "and give it to Prometheus as its bearer token",
        )


def scraper(settings: SettingsDep, authorization: Annotated[str | None, Header()] = None) -> None:
    """Let through only `Authorization: Bearer <COHORT_METRICS_TOKEN>`."""
    expected = settings.METRICS_TOKEN
    if not expected:
        raise MetricsOff
    scheme, _, value = (authorization or "").partition(" ")
    # In constant time: the answer's timing must not tell how much of a guess was right.
    if scheme.lower() != "bearer" or not secrets.compare_digest(
        value.strip().encode(), expected.encode()
    ):
        raise Unauthorized(
            "/metrics needs Authorization: Bearer <COHORT_METRICS_TOKEN> "
            "(the metrics token, not an API token)"
        )


@router.get(
    "/metrics",
    response_class=Response,
    dependencies=[Depends(scraper)],
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}, **errors(401, 404)},
)
def read_service_metrics() -> Response:
    """Jobs by status, queue depth, submission-to-running time, replicas and stragglers by
    node, ingest counters. Needs `Authorization: Bearer <COHORT_METRICS_TOKEN>`; off when
    it is unset."""
    # A registry per scrape: the collector reads SQL each time, and nothing is kept
    # in process memory that a second api process would not see.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(get_redis()))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
