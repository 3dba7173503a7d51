"""champion against challenger: schedules' evaluate block, evaluation jobs' files, and
the evaluations table

Revision ID: 0029_evaluations
Revises: 0028_data_triggers
Create Date: 2026-11-29 15:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0029_evaluations"
down_revision: str | Sequence[str] | None = "0028_data_triggers"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("schedules", sa.Column("evaluate", sa.JSON(), nullable=True))
    # "evaluation_failed" is longer than the 16 characters the first decisions needed.
    with op.batch_alter_table("schedule_runs") as batch:
        batch.alter_column(
            "decision", type_=sa.String(length=32), existing_type=sa.String(length=16)
        )
    op.add_column("jobs", sa.Column("evaluation", sa.JSON(), nullable=True))
    op.create_table(
        "evaluations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("schedule_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("model_job_id", sa.Integer(), nullable=True),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("holdout_path", sa.String(length=1024), nullable=False),
        sa.Column("holdout_digest", sa.String(length=80), nullable=False),
        sa.Column("metric", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["schedule_id"], ["schedules.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["schedule_runs.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["model_job_id"], ["jobs.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "run_id", "model_job_id", "holdout_digest", name="uq_evaluations_run_model_holdout"
        ),
    )
    op.create_index(
        "ix_evaluations_model", "evaluations", ["schedule_id", "model_job_id", "holdout_digest"]
    )


def downgrade() -> None:
    op.drop_index("ix_evaluations_model", table_name="evaluations")
    op.drop_table("evaluations")
    op.drop_column("jobs", "evaluation")
    op.execute(
        "UPDATE schedule_runs SET decision = 'no_metric' WHERE decision = 'evaluation_failed'"
    )
    with op.batch_alter_table("schedule_runs") as batch:
        batch.alter_column(
            "decision", type_=sa.String(length=16), existing_type=sa.String(length=32)
        )
    op.drop_column("schedules", "evaluate")
