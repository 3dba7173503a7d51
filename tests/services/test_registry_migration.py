"""Migration 0026 on a database whose schedules promoted models before the registry: each
promoted job becomes version 1 of a model named as its schedule, with the alias
`production` and the lineage still found (its metrics, hyperparameters, schedule); its
downgrade removes the registry. On SQLite, the embedded default, and on PostgreSQL (a
bare database of its own: the tests' template is migrated with no rows to move)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.config import Config
from sqlalchemy.orm import Session

from alembic import command
from cli.stack import migrations_directory
from services.db import make_engine
from services.models import AliasMove, MetricPoint, ModelAlias, ModelVersion, RegisteredModel
from services.registry.schemas import Lineage
from services.statuses import JobStatus
from tests.factories import create_job, create_token
from tests.services.test_sweep_trials_migration import upgrade


def downgrade(url: str, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(migrations_directory()))
    config.attributes["configure_logger"] = False
    config.attributes["database_url"] = url
    command.downgrade(config, revision)


def _promoted_schedule(session: Session, project_id: int, name: str, job_id: int | None) -> None:
    # Core, not the ORM: the Schedule model has the columns this migration adds.
    session.execute(
        sa.text(
            "INSERT INTO schedules (project_id, name, job_template, interval_seconds, timezone, "
            "concurrency_policy, paused, last_outcome, promote_metric, promote_mode, "
            "promoted_job_id, promoted_value, created_at, updated_at) VALUES (:p, :n, '{}', 60, "
            "'UTC', 'allow', false, '', 'eval_accuracy', 'max', :j, 0.9, :t, :t)"
        ),
        {"p": project_id, "n": name, "j": job_id, "t": "2026-11-01 00:00:00.000000"},
    )


def test_each_promoted_model_becomes_version_one_with_production_on_it(
    bare_database_url: str,
) -> None:
    url = bare_database_url
    upgrade(url, "0025_data_versions")
    engine = make_engine(url)
    with Session(engine) as session, session.begin():
        _, token = create_token(session)
        job = create_job(
            session, token.project_id, trainer="mlp_digits", hyperparameters={"epochs": 3}
        )
        # Core, not transition_job: it reads the job through today's model (columns of
        # later migrations) and announces the end to webhooks (a later table).
        session.execute(
            sa.text("UPDATE jobs SET status = :s, finished_at = :t WHERE id = :id"),
            {"s": JobStatus.SUCCEEDED.value, "t": "2026-11-01 00:00:00.000000", "id": job.id},
        )
        for step, value in ((1, 0.5), (2, 0.9)):
            session.add(
                MetricPoint(
                    job_id=job.id,
                    attempt=1,
                    replica=0,
                    step=step,
                    epoch=None,
                    name="eval_accuracy",
                    value=value,
                    ts=0.0,
                )
            )
        _promoted_schedule(session, token.project_id, "nightly", job.id)
        _promoted_schedule(session, token.project_id, "never-promoted", None)
        project_id, job_id = token.project_id, job.id
    upgrade(url, "heads")

    with Session(engine) as session:
        models = session.execute(sa.select(RegisteredModel)).scalars().all()
        assert [(m.project_id, m.name, m.latest_version) for m in models] == [
            (project_id, "nightly", 1)
        ]
        version = session.execute(sa.select(ModelVersion)).scalar_one()
        assert (version.version, version.job_id) == (1, job_id)
        assert version.artifact == f"jobs/{job_id}/model"
        lineage = Lineage.model_validate(version.lineage)  # the shape the API answers with
        assert lineage.metrics == {"eval_accuracy": 0.9}
        assert lineage.hyperparameters["epochs"] == 3
        assert lineage.schedule_name == "nightly" and lineage.trainer == "mlp_digits"
        alias = session.execute(sa.select(ModelAlias)).scalar_one()
        assert (alias.name, alias.version) == ("production", 1)
        move = session.execute(sa.select(AliasMove)).scalar_one()
        assert (move.from_version, move.to_version) == (None, 1)
        assert move.moved_by == "migration 0026_model_registry"
    downgrade(url, "0025_data_versions")
    inspector = sa.inspect(engine)
    assert not set(inspector.get_table_names()) & {"registered_models", "model_versions"}
    assert "promote_alias" not in {c["name"] for c in inspector.get_columns("schedules")}
    engine.dispose()
