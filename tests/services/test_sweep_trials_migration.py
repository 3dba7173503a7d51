"""Migration 0023 on a database with sweeps stored before Optuna chose the parameters: their
trials get their parameters back from their jobs, and a grid sweep still running keeps the
order it ran its combinations in. On SQLite, the embedded default (the same migrations run
on PostgreSQL for every test database)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic.config import Config
from sqlalchemy.orm import Session

from alembic import command
from cli.stack import migrations_directory
from services.db import make_engine
from services.jobs import store as jobs
from services.jobs.schemas import JobCreate
from services.jobs.transitions import transition_job
from services.models import Job, Sweep, SweepTrial
from services.settings import get_settings
from services.statuses import JobStatus, SweepStatus
from services.sweeps import advance
from tests.factories import create_token

GRID = {"learning_rate": [0.1, 0.01], "width": [8, 16]}
SPEC = {
    "name": "old",
    "template": {"trainer": "mlp_digits", "strategy": "one_device", "replicas": 1},
    "space": {"grid": GRID},
    "max_concurrent": 2,
    "objective": {"metric": "eval_accuracy", "mode": "max"},
    "early_stopping": {"min_steps": 2},  # before the rules were many: no `rule`
}


def upgrade(url: str, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(migrations_directory()))
    config.attributes["configure_logger"] = False
    config.attributes["database_url"] = url
    command.upgrade(config, revision)


def test_a_running_grid_sweep_keeps_its_order_and_its_trials_their_parameters(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'cohort.db'}"
    upgrade(url, "0022_image_jobs")
    engine = make_engine(url)
    with Session(engine) as session, session.begin():
        _, token = create_token(session)
        sweep = Sweep(
            project_id=token.project_id,
            name="old",
            spec=SPEC,
            seed=0,
            trials_total=4,
            trials_created=2,
            max_concurrent=2,
            reason="",
            stops_early=True,
        )
        session.add(sweep)
        session.flush()
        # Its first two trials, as the in-house grid made them: itertools.product order.
        for index, (lr, width) in enumerate([(0.1, 8), (0.1, 16)]):
            job_in = JobCreate.model_validate(
                {**SPEC["template"], "hyperparameters": {"learning_rate": lr, "width": width}}
            )
            jobs.create_job(
                session=session,
                project_id=token.project_id,
                job_in=job_in,
                settings=get_settings(),
                trial_of=(sweep.id, index),
            )
        sweep_id = sweep.id
    upgrade(url, "heads")

    with Session(engine) as session, session.begin():
        rows = session.execute(
            sa.select(SweepTrial.trial_index, SweepTrial.parameters)
            .where(SweepTrial.sweep_id == sweep_id)
            .order_by(SweepTrial.trial_index)
        ).all()
        assert [tuple(row) for row in rows] == [
            (0, {"learning_rate": 0.1, "width": 8}),
            (1, {"learning_rate": 0.1, "width": 16}),
            (2, {"learning_rate": 0.01, "width": 8}),
            (3, {"learning_rate": 0.01, "width": 16}),
        ]
        # The pass goes on with the combinations it had yet to run, in their order.
        for job in session.execute(sa.select(Job).where(Job.sweep_id == sweep_id)).scalars():
            for target in (JobStatus.SCHEDULED, JobStatus.RUNNING, JobStatus.SUCCEEDED):
                transition_job(session=session, job_id=job.id, target=target, reason="test")
        created = advance.advance_sweeps(session=session, settings=get_settings()).created
        made = [session.get(Job, job_id) for job_id in created]
        assert [(j.trial_index, j.hyperparameters["width"]) for j in made if j] == [(2, 8), (3, 16)]
        assert all(j.hyperparameters["learning_rate"] == 0.01 for j in made if j)
        sweep = session.get(Sweep, sweep_id)
        assert sweep is not None and sweep.status is SweepStatus.RUNNING
    engine.dispose()
