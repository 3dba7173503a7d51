"""Migration 0029 on SQLite, the embedded default (PostgreSQL runs it for every test
database): a run decided before it keeps its decision, a decision as long as
`evaluation_failed` fits afterwards, and the downgrade gives the columns back."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic.config import Config
from alembic.script import ScriptDirectory

from alembic import command
from cli.stack import migrations_directory
from services.db import make_engine


def config_for(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_directory()))
    config.attributes["configure_logger"] = False
    config.attributes["database_url"] = url
    return config


def test_upgrade_and_downgrade_keep_the_decisions(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cohort.db'}"
    config = config_for(url)
    before = ScriptDirectory.from_config(config).get_revision("0029_evaluations").down_revision
    assert isinstance(before, str)
    command.upgrade(config, before)
    engine = make_engine(url)
    with engine.begin() as db:
        db.execute(
            sa.text("INSERT INTO projects (id, name, created_at) VALUES (1, 'p', '2026-01-01')")
        )
        db.execute(
            sa.text(
                "INSERT INTO schedules (id, project_id, name, job_template, timezone, "
                "concurrency_policy, paused, last_outcome, promote_mode, created_at, updated_at) "
                "VALUES (1, 1, 's', '{}', 'UTC', 'allow', 0, '', 'max', '2026-01-01', '2026-01-01')"
            )
        )
        db.execute(
            sa.text(
                "INSERT INTO schedule_runs (id, schedule_id, scheduled_for, outcome, reason, "
                "decision, decision_reason, created_at) VALUES "
                "(1, 1, '2026-01-01', 'fired', '', 'promoted', 'first', '2026-01-01')"
            )
        )
    command.upgrade(config, "heads")
    with engine.begin() as db:
        assert db.execute(sa.text("SELECT decision FROM schedule_runs")).scalar_one() == "promoted"
        assert db.execute(sa.text("SELECT evaluate FROM schedules")).scalar_one() is None
        db.execute(sa.text("UPDATE schedule_runs SET decision = 'evaluation_failed'"))
        columns = {c["name"] for c in sa.inspect(db).get_columns("evaluations")}
        assert {"model_job_id", "job_id", "holdout_digest", "value", "status"} <= columns
    command.downgrade(config, before)
    with engine.begin() as db:
        assert "evaluations" not in sa.inspect(db).get_table_names()
        assert db.execute(sa.text("SELECT decision FROM schedule_runs")).scalar_one() == "no_metric"
    engine.dispose()
