"""The embedded default's store: SQLite takes the same points once, and says which were new."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from cli.stack import migrate
from services.auth.tokens import ensure_token
from services.db import make_engine
from services.jobs import store as jobs
from services.jobs.schemas import JobCreate
from services.settings import Settings
from services.telemetry import metrics
from tests.factories import assert_rollups_match_points


def test_sqlite_insert_points_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cohort.db'}"
    migrate(url)
    engine = make_engine(url)
    with Session(engine) as session:
        token = ensure_token(
            session=session, token="t" * 20, project_name="p", name="t", scopes=["read", "submit"]
        )
        job, _ = jobs.create_job(
            session=session,
            project_id=token.project_id,
            job_in=JobCreate(name="s", replicas=2),
            settings=Settings(DATA_DIR=tmp_path),
        )
        rows = [
            {
                "job_id": job.id,
                "attempt": 1,
                "replica": r,
                "step": s,
                "epoch": 0,
                "name": "loss",
                "value": float(s),
                "ts": 1.0,
            }
            for r in (0, 1)
            for s in (1, 2)
        ]
        first = metrics.insert_points(session=session, rows=rows)
        assert [(p["replica"], p["step"]) for p in first] == [(0, 1), (0, 2), (1, 1), (1, 2)]
        assert [p["id"] for p in first] == sorted(p["id"] for p in first)
        more = [*rows, {**rows[0], "step": 3}, {**rows[0], "job_id": job.id + 99}]
        again = metrics.insert_points(session=session, rows=more)
        assert [(p["replica"], p["step"], p["value"]) for p in again] == [(0, 3, 1.0)]
        # Rollups take the new points once, an absent epoch included.
        metrics.insert_points(
            session=session,
            rows=[
                {**rows[0], "step": 4, "epoch": None},
                {**rows[0], "step": 250, "epoch": 2},
                {**rows[0], "step": 4, "epoch": None},
            ],
        )
        assert assert_rollups_match_points(session, job.id) == 3  # 2 in bucket 0; 1 in 2
        session.commit()
    engine.dispose()
