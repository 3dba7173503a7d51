"""The queued-jobs quota under concurrent submissions on PostgreSQL: each submission in its
own session and transaction, committing for real, in a project of its own that the test
deletes afterwards. No race admits more jobs than the quota."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from services.auth import tokens
from services.exceptions import QuotaExceeded
from services.jobs import quotas
from services.jobs.quota_schemas import QuotaUpdate
from services.jobs.schemas import JobCreate
from services.jobs.store import create_job
from services.models import Job, Project
from services.settings import get_settings

SUBMISSIONS = 50
QUOTA = 7


@pytest.fixture
def racing(engine: Engine) -> Iterator[tuple[Engine, int]]:
    """An engine of 25 connections (the database is shared: half of SUBMISSIONS are in
    flight at once, the rest queue for a connection) and a fresh project with the quota."""
    name = f"race-{uuid.uuid4().hex[:8]}"
    with Session(engine) as session, session.begin():
        token = tokens.ensure_token(
            session=session,
            token="race_" + uuid.uuid4().hex,
            project_name=name,
            name="t",
            scopes=["read", "submit", "schedules"],
        )
        quotas.set_quota(
            session=session,
            project_name=name,
            settings=get_settings(),
            quota_in=QuotaUpdate(max_queued_jobs=QUOTA),
        )
        project_id = token.project_id
    own = sa.create_engine(engine.url, pool_size=25, max_overflow=0, pool_timeout=60)
    yield own, project_id
    own.dispose()
    with Session(engine) as session, session.begin():
        session.execute(sa.delete(Job).where(Job.project_id == project_id))
        session.execute(sa.delete(Project).where(Project.id == project_id))


def test_fifty_concurrent_submissions_admit_exactly_the_quota(racing: tuple[Engine, int]) -> None:
    engine, project_id = racing
    barrier = threading.Barrier(SUBMISSIONS)
    created: list[int] = []
    refused: list[QuotaExceeded] = []
    errors: list[BaseException] = []
    spec = JobCreate.model_validate({"strategy": "one_device", "replicas": 1})

    def submit() -> None:
        try:
            barrier.wait(timeout=30)
            with Session(engine, expire_on_commit=False) as session, session.begin():
                job, _ = create_job(
                    session=session, project_id=project_id, job_in=spec, settings=get_settings()
                )
            created.append(job.id)
        except QuotaExceeded as exc:
            refused.append(exc)
        except BaseException as exc:  # reported to the test
            errors.append(exc)

    threads = [threading.Thread(target=submit) for _ in range(SUBMISSIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert len(created) == QUOTA and len(refused) == SUBMISSIONS - QUOTA
    assert all((r.used, r.allowed) == (QUOTA, QUOTA) for r in refused)
    with Session(engine) as session:
        stored = session.execute(
            sa.select(sa.func.count()).select_from(Job).where(Job.project_id == project_id)
        ).scalar_one()
    assert stored == QUOTA
