"""the model registry: models, versions, aliases and their moves; a schedule's promotion
names its model and alias; every schedule's promoted job becomes version 1 of its model

Revision ID: 0026_model_registry
Revises: 0025_data_versions
Create Date: 2026-11-29 15:00:00
"""

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa

from alembic import op

revision: str = "0026_model_registry"
down_revision: str | Sequence[str] | None = "0025_data_versions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BY = "migration 0026_model_registry"


def _tables() -> None:
    op.create_table(
        "registered_models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("latest_version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("project_id", "name", name="uq_registered_models_project_name"),
    )
    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("artifact", sa.String(length=1024), nullable=False),
        sa.Column("lineage", sa.JSON(), nullable=False),
        sa.Column("registered_by", sa.String(length=128), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["registered_models.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], deferrable=True, initially="DEFERRED"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("model_id", "version", name="uq_model_versions_model_version"),
    )
    op.create_index("ix_model_versions_job_id", "model_versions", ["job_id"])
    op.create_table(
        "model_aliases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_by", sa.String(length=128), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["registered_models.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("model_id", "name", name="uq_model_aliases_model_name"),
    )
    op.create_table(
        "model_alias_moves",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("alias_id", sa.Integer(), nullable=False),
        sa.Column("from_version", sa.Integer(), nullable=True),
        sa.Column("to_version", sa.Integer(), nullable=False),
        sa.Column("moved_by", sa.String(length=128), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("moved_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["alias_id"], ["model_aliases.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_model_alias_moves_alias", "model_alias_moves", ["alias_id", "id"])
    with op.batch_alter_table("schedules") as batch_op:
        batch_op.add_column(sa.Column("promote_model", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("promote_alias", sa.String(length=64), nullable=True))


def _final_metrics(bind: sa.Connection, job: Any) -> dict[str, float]:
    """The last value of each metric, replica 0, the job's attempt (as the registry does)."""
    rows = bind.execute(
        sa.text(
            "SELECT p.name, p.value FROM metric_points p JOIN (SELECT name, max(step) AS step "
            "FROM metric_points WHERE job_id = :job AND attempt = :attempt AND replica = 0 "
            "GROUP BY name) last ON last.name = p.name AND last.step = p.step "
            "WHERE p.job_id = :job AND p.attempt = :attempt AND p.replica = 0"
        ),
        {"job": job.id, "attempt": job.attempt},
    ).all()
    return {str(name): float(value) for name, value in rows}


def _lineage(bind: sa.Connection, job: Any, schedule: Any) -> dict[str, Any]:
    """The lineage the registry would have copied (services/registry/schemas.py: Lineage);
    the inputs' content digests are left unknown: what the data holds now need not be
    what the job read, and a migration reads no store."""

    def loaded(value: Any) -> Any:  # JSON columns come back as text through sa.text
        return json.loads(value) if isinstance(value, str) else value

    finished = job.finished_at
    return {
        "job_id": job.id,
        "job_name": job.name,
        "attempt": job.attempt,
        "trainer": job.trainer,
        "command": loaded(job.command),
        "image": job.image,
        "bundle": job.bundle,
        "inputs": [
            {"name": name, "path": path, "digest": None}
            for name, path in sorted((loaded(job.inputs) or {}).items())
        ],
        "hyperparameters": loaded(job.hyperparameters) or {},
        "metrics": _final_metrics(bind, job),
        "schedule_id": schedule.id,
        "schedule_name": schedule.name,
        "sweep_id": job.sweep_id,
        "trial_index": job.trial_index,
        "finished_at": finished
        if isinstance(finished, str) or finished is None
        else finished.isoformat(),
    }


def _promoted_to_versions() -> None:
    """Every schedule's promoted job becomes version 1 of a model named as the schedule,
    with the alias `production` on it (what a promotion does from now on)."""
    bind = op.get_bind()
    meta = sa.MetaData()
    models, versions, aliases, moves = (
        sa.Table(name, meta, autoload_with=bind)
        for name in ("registered_models", "model_versions", "model_aliases", "model_alias_moves")
    )
    now = datetime.now(UTC)
    rows = (
        bind.execute(
            sa.text(
                "SELECT s.id AS schedule_id, s.name AS schedule_name, j.project_id, j.id, j.name, "
                "j.attempt, j.trainer, j.command, j.image, j.bundle, j.inputs, j.hyperparameters, "
                "j.sweep_id, j.trial_index, j.finished_at FROM schedules s "
                "JOIN jobs j ON j.id = s.promoted_job_id ORDER BY s.id"
            )
        )
        .mappings()
        .all()
    )
    for row in rows:
        job = SimpleNamespace(**row)
        schedule = SimpleNamespace(id=row["schedule_id"], name=row["schedule_name"])
        model_id = bind.execute(
            models.insert().values(
                project_id=job.project_id,
                name=schedule.name,
                latest_version=1,
                created_at=now,
                updated_at=now,
            )
        ).inserted_primary_key[0]  # type: ignore[index]
        bind.execute(
            versions.insert().values(
                model_id=model_id,
                version=1,
                job_id=job.id,
                artifact=f"jobs/{int(job.id)}/model",
                lineage=_lineage(bind, job, schedule),
                registered_by=BY,
                registered_at=now,
            )
        )
        alias_id = bind.execute(
            aliases.insert().values(
                model_id=model_id, name="production", version=1, updated_by=BY, updated_at=now
            )
        ).inserted_primary_key[0]  # type: ignore[index]
        bind.execute(
            moves.insert().values(
                alias_id=alias_id,
                from_version=None,
                to_version=1,
                moved_by=BY,
                reason="the schedule's promoted model before the registry",
                moved_at=now,
            )
        )


def upgrade() -> None:
    _tables()
    _promoted_to_versions()


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch_op:
        batch_op.drop_column("promote_alias")
        batch_op.drop_column("promote_model")
    op.drop_index("ix_model_alias_moves_alias", table_name="model_alias_moves")
    op.drop_table("model_alias_moves")
    op.drop_table("model_aliases")
    op.drop_index("ix_model_versions_job_id", table_name="model_versions")
    op.drop_table("model_versions")
    op.drop_table("registered_models")
