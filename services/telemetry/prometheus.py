"""The service's own Prometheus figures, read from SQL (and Redis counters) at scrape time.

The api may run as several processes and the ingest runs in the scheduler, so nothing
here counts in process memory: gauges come from SQL when Prometheus scrapes, and the
ingest counters from the Redis hash the ingester increments (services/telemetry/live.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis
import sqlalchemy as sa
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector

from services.cluster.stragglers import stragglers_by_node
from services.db import session_scope
from services.models import Job, Replica
from services.statuses import TERMINAL_REPLICA_STATUSES, JobStatus
from services.telemetry import live

WAIT_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600)


def wait_histogram(waits: list[float]) -> tuple[list[tuple[str, float]], float]:
    """Cumulative Prometheus buckets and the sum for submission-to-running waits."""
    buckets = [(str(float(b)), float(sum(1 for w in waits if w <= b))) for b in WAIT_BUCKETS]
    buckets.append(("+Inf", float(len(waits))))
    return buckets, float(sum(waits))


def stragglers_counter() -> CounterMetricFamily:
    """Replicas named stragglers, by node (services/cluster/stragglers.py). By node, not by
    job: a node's count is what says it is slow, and jobs come and go (a label per job
    would grow Prometheus' series without bound)."""
    with session_scope() as session:
        counts = stragglers_by_node(session)
    named = CounterMetricFamily(
        "cohort_stragglers", "Replicas named stragglers, by node.", labels=["node"]
    )
    for node_id, count in sorted(counts.items()):
        named.add_metric([node_id], count)
    return named


class ServiceCollector(Collector):
    """Jobs by status, queue depth, time to running, replicas and stragglers by node, rows
    ingested."""

    def __init__(self, redis_client: Any) -> None:
        self.redis_client = redis_client

    def collect(self) -> Iterator[Any]:
        with session_scope() as session:
            by_status = dict(
                session.execute(sa.select(Job.status, sa.func.count()).group_by(Job.status)).all()
            )
            started = session.execute(
                sa.select(Job.created_at, Job.started_at).where(Job.started_at.is_not(None))
            ).all()
            replicas = session.execute(
                sa.select(Replica.node_id, Replica.status, sa.func.count())
                .where(Replica.status.not_in(TERMINAL_REPLICA_STATUSES))
                .group_by(Replica.node_id, Replica.status)
            ).all()
        jobs = GaugeMetricFamily("cohort_jobs", "Jobs by status.", labels=["status"])
        for status in JobStatus:
            jobs.add_metric([status.value], by_status.get(status, 0))
        yield jobs
        yield GaugeMetricFamily(
            "cohort_queue_depth",
            "Jobs waiting to be placed.",
            value=by_status.get(JobStatus.QUEUED, 0) + by_status.get(JobStatus.RESTARTING, 0),
        )
        buckets, total = wait_histogram(
            [(s - c).total_seconds() for c, s in started if s is not None]
        )
        yield HistogramMetricFamily(
            "cohort_job_wait_seconds",
            "Time from submission to running, per job.",
            buckets=buckets,
            sum_value=total,
        )
        by_node = GaugeMetricFamily(
            "cohort_replicas", "Live replicas by node and status.", labels=["node", "status"]
        )
        for node_id, replica_status, count in replicas:
            by_node.add_metric([node_id, str(replica_status)], count)
        yield by_node
        yield stragglers_counter()
        ingested = CounterMetricFamily(
            "cohort_ingested_rows", "Rows stored by the ingester.", labels=["kind"]
        )
        try:
            stats = live.read_stats(self.redis_client)
        except redis.RedisError:
            stats = {}
        for kind in ("metric", "log"):
            ingested.add_metric([kind], stats.get(f"{kind}_rows", 0))
        yield ingested
        # Events and heartbeats the scheduler ignored: unsigned, badly signed, about a
        # replica another node runs (workers/control/refusals.py writes them).
        refused = CounterMetricFamily(
            "cohort_refused_messages",
            "Messages from nodes the scheduler ignored.",
            labels=["reason"],
        )
        for field, count in sorted(stats.items()):
            if field.startswith("refused:"):
                refused.add_metric([field.removeprefix("refused:")], count)
        yield refused
