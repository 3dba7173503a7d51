"""`GET /metrics`: the service's own figures in the Prometheus text format."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from services.telemetry.prometheus import ServiceCollector
from services.wire.client import get_redis

router = APIRouter(tags=["health"])


@router.get("/metrics", response_class=Response)
def read_service_metrics() -> Response:
    """Jobs by status, queue depth, submission-to-running time, replicas by node, ingest
    counters. Unauthenticated, like /healthz: scrape it from inside your network."""
    # A registry per scrape: the collector reads SQL each time, and nothing is kept
    # in process memory that a second api process would not see.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(get_redis()))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
