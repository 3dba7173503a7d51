"""Plain helpers that make test data through the services."""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Any

from sqlalchemy.orm import Session

from services.auth import tokens
from services.auth.scopes import Scope
from services.jobs import store as jobs
from services.jobs.schemas import JobCreate
from services.models import ApiToken, Job
from services.settings import get_settings
from services.statuses import ReplicaStatus

# What a user's token may do: all but admin.
USER_SCOPES = (Scope.READ, Scope.SUBMIT, Scope.SCHEDULES)


def create_token(
    session: Session, project: str = "default", scopes: tuple[Scope, ...] = USER_SCOPES
) -> tuple[str, ApiToken]:
    token = "test_" + secrets.token_hex(8)
    row = tokens.ensure_token(
        session=session, token=token, project_name=project, name="test", scopes=scopes
    )
    return token, row


def create_job(session: Session, project_id: int, **spec: Any) -> Job:
    job, _ = jobs.create_job(
        session=session,
        project_id=project_id,
        job_in=JobCreate.model_validate(spec),
        settings=get_settings(),
    )
    return job


def assert_rollups_match_points(session: Session, job_id: int) -> int:
    """The job's metric rollups are exactly what its stored points sum to; returns how
    many rollup rows there are."""
    import sqlalchemy as sa

    from services.models import MetricPoint, MetricRollup
    from services.telemetry.metrics import ROLLUP_STEPS

    p = MetricPoint
    bucket = p.step // ROLLUP_STEPS  # one expression object: one bind parameter
    expected = {
        tuple(row[:5]): tuple(row[5:])
        for row in session.execute(
            sa.select(
                p.job_id,
                p.attempt,
                p.replica,
                p.name,
                bucket,
                sa.func.count(),
                sa.func.sum(p.value),
                sa.func.min(p.step),
                sa.func.max(p.step),
                sa.func.max(p.epoch),
                sa.func.max(p.ts),
            )
            .where(p.job_id == job_id)
            .group_by(p.job_id, p.attempt, p.replica, p.name, bucket)
        )
    }
    r = MetricRollup
    got = {
        tuple(row[:5]): tuple(row[5:])
        for row in session.execute(
            sa.select(
                r.job_id,
                r.attempt,
                r.replica,
                r.name,
                r.bucket,
                r.points,
                r.total,
                r.first_step,
                r.last_step,
                r.last_epoch,
                r.last_ts,
            ).where(r.job_id == job_id)
        )
    }
    assert got.keys() == expected.keys()
    for key, (n, total, first, last, epoch, ts) in expected.items():
        assert got[key][0] == n and got[key][2:] == (first, last, epoch, ts), key
        assert abs(got[key][1] - total) <= 1e-9 * max(1.0, abs(total)), key
    return len(got)


def replica_rows(job_id: int, count: int, now: dt.datetime) -> list[dict[str, Any]]:
    """`count` rows of `replicas` for attempt 1 of job `job_id`, as a placing pass makes
    them (services/cluster/queue_placement.py), on node `n1`."""
    return [
        {
            "job_id": job_id,
            "attempt": 1,
            "index": index,
            "node_id": "n1",
            "address": f"10.1.0.1:{2000 + index}",
            "port": 2000 + index,
            "gpu_ids": "0,1" if index else "",
            "role": "worker",
            "role_index": index,
            # A dict, and None (a 1-replica gang's): JSON null, not SQL NULL, either way.
            "tf_config": {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"index": index}}
            if index
            else None,
            "status": ReplicaStatus.PENDING,
            "dispatched_at": now,
            "created_at": now,
        }
        for index in range(count)
    ]
