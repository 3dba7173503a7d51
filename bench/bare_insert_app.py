"""The ceiling for bench/api_throughput.py: a bare FastAPI + SQLAlchemy insert route.

No auth, no quota, no Cohort code: a sync route that validates a small body with Pydantic,
inserts one row into the same `jobs` table of the same database in its own transaction,
and answers the new id. It runs under the same uvicorn settings as `cohort api`.

    COHORT_DATABASE_URL=postgresql+psycopg://... uvicorn bench.bare_insert_app:app
    BARE_PROJECT_ID=<an existing project's id>
"""

from __future__ import annotations

import datetime as dt
import os

import sqlalchemy as sa
from fastapi import FastAPI
from pydantic import BaseModel

engine = sa.create_engine(os.environ["COHORT_DATABASE_URL"], pool_size=10, max_overflow=40)
jobs = sa.Table("jobs", sa.MetaData(), autoload_with=engine)
PROJECT_ID = int(os.environ["BARE_PROJECT_ID"])

app = FastAPI()


class JobIn(BaseModel):
    name: str = "job"
    strategy: str = "one_device"
    replicas: int = 1


class JobOut(BaseModel):
    id: int
    name: str
    status: str


@app.post("/api/v1/jobs", status_code=201)
def create_job(job_in: JobIn) -> JobOut:
    now = dt.datetime.now(dt.UTC)
    with engine.begin() as connection:
        job_id = connection.execute(
            jobs.insert()
            .values(
                project_id=PROJECT_ID,
                name=job_in.name,
                strategy=job_in.strategy,
                replicas=job_in.replicas,
                status="queued",
                reason="bare insert",
                spec_hash="",
                hyperparameters={},
                env={},
                inputs={},
                distribution={},
                result={},
                gpus_per_replica=0,
                restart_policy="never",
                max_restarts=0,
                priority=0,
                attempt=1,
                created_at=now,
                updated_at=now,
            )
            .returning(jobs.c.id)
        ).scalar_one()
    return JobOut(id=job_id, name=job_in.name, status="queued")


@app.get("/api/v1/jobs")
def list_jobs(limit: int = 50) -> dict[str, list[JobOut]]:
    """The newest jobs, as a bare list route would read them."""
    with engine.connect() as connection:
        rows = connection.execute(
            sa.select(jobs.c.id, jobs.c.name, jobs.c.status)
            .where(jobs.c.project_id == PROJECT_ID)
            .order_by(jobs.c.id.desc())
            .limit(limit)
        )
        return {"items": [JobOut(id=r.id, name=r.name, status=r.status) for r in rows]}


@app.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}
