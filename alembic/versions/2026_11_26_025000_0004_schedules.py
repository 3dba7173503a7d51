"""retraining schedules, their runs, and the schedule a job was fired by

Revision ID: 0004_schedules
Revises: 0001
Create Date: 2026-11-26 02:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0004_schedules"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("job_template", sa.JSON(), nullable=False),
        sa.Column("cron", sa.String(length=128), nullable=True),
        sa.Column("interval_seconds", sa.Integer(), nullable=True),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("concurrency_policy", sa.String(length=16), nullable=False),
        sa.Column("starting_deadline_seconds", sa.Integer(), nullable=True),
        sa.Column("successful_jobs_history_limit", sa.Integer(), nullable=True),
        sa.Column("failed_jobs_history_limit", sa.Integer(), nullable=True),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("next_fire_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_fired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_outcome", sa.String(length=32), nullable=False),
        sa.Column("promote_metric", sa.String(length=64), nullable=True),
        sa.Column("promote_mode", sa.String(length=8), nullable=False),
        sa.Column("promoted_job_id", sa.Integer(), nullable=True),
        sa.Column("promoted_value", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["promoted_job_id"], ["jobs.id"], ondelete="SET NULL", name="fk_schedules_promoted_job"
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("project_id", "name", name="uq_schedules_project_name"),
    )
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.create_index("ix_schedules_due", ["paused", "next_fire_at"], unique=False)

    op.create_table(
        "schedule_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("schedule_id", sa.Integer(), nullable=False),
        sa.Column("scheduled_for", sa.DateTime(timezone=True), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("decision", sa.String(length=16), nullable=True),
        sa.Column("metric_value", sa.Float(), nullable=True),
        sa.Column("decision_reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["schedule_id"], ["schedules.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("schedule_id", "scheduled_for", name="uq_schedule_runs_fire"),
    )
    with op.batch_alter_table("schedule_runs", schema=None) as batch_op:
        batch_op.create_index("ix_schedule_runs_pending", ["decision"], unique=False)

    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("schedule_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("scheduled_for", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_foreign_key(
            "fk_jobs_schedule_id", "schedules", ["schedule_id"], ["id"], ondelete="SET NULL"
        )
        batch_op.create_index("ix_jobs_schedule_id", ["schedule_id"], unique=False)
        batch_op.create_unique_constraint("uq_jobs_schedule_fire", ["schedule_id", "scheduled_for"])


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_constraint("uq_jobs_schedule_fire", type_="unique")
        batch_op.drop_index("ix_jobs_schedule_id")
        batch_op.drop_constraint("fk_jobs_schedule_id", type_="foreignkey")
        batch_op.drop_column("scheduled_for")
        batch_op.drop_column("schedule_id")
    with op.batch_alter_table("schedule_runs", schema=None) as batch_op:
        batch_op.drop_index("ix_schedule_runs_pending")
    op.drop_table("schedule_runs")
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.drop_index("ix_schedules_due")
    op.drop_table("schedules")
