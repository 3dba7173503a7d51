"""sweeps: many trials of one job template; jobs carry their sweep and trial index;
a schedule may fire a sweep

Revision ID: 0012_sweeps
Revises: 0014_merge
Create Date: 2026-11-26 13:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0012_sweeps"
down_revision: str | Sequence[str] | None = "0014_merge"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("trials_total", sa.Integer(), nullable=False),
        sa.Column("trials_created", sa.Integer(), nullable=False),
        sa.Column("max_concurrent", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("best_job_id", sa.Integer(), nullable=True),
        sa.Column("best_value", sa.Float(), nullable=True),
        sa.Column("stops_early", sa.Boolean(), nullable=False),
        sa.Column("stopping_checked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("schedule_id", sa.Integer(), nullable=True),
        sa.Column("scheduled_for", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["best_job_id"], ["jobs.id"], ondelete="SET NULL", name="fk_sweeps_best_job"
        ),
        sa.ForeignKeyConstraint(["schedule_id"], ["schedules.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("schedule_id", "scheduled_for", name="uq_sweeps_schedule_fire"),
    )
    with op.batch_alter_table("sweeps", schema=None) as batch_op:
        batch_op.create_index("ix_sweeps_status", ["status"], unique=False)
        batch_op.create_index("ix_sweeps_project_id_id", ["project_id", "id"], unique=False)
        batch_op.create_index("ix_sweeps_schedule_id", ["schedule_id"], unique=False)

    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sweep_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("trial_index", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            "fk_jobs_sweep_id", "sweeps", ["sweep_id"], ["id"], ondelete="SET NULL"
        )
        batch_op.create_unique_constraint("uq_jobs_sweep_trial", ["sweep_id", "trial_index"])
        batch_op.create_index("ix_jobs_sweep_id_status", ["sweep_id", "status"], unique=False)

    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sweep_template", sa.JSON(), nullable=True))
    with op.batch_alter_table("schedule_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sweep_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            "fk_schedule_runs_sweep_id", "sweeps", ["sweep_id"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("schedule_runs", schema=None) as batch_op:
        batch_op.drop_constraint("fk_schedule_runs_sweep_id", type_="foreignkey")
        batch_op.drop_column("sweep_id")
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.drop_column("sweep_template")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_sweep_id_status")
        batch_op.drop_constraint("uq_jobs_sweep_trial", type_="unique")
        batch_op.drop_constraint("fk_jobs_sweep_id", type_="foreignkey")
        batch_op.drop_column("trial_index")
        batch_op.drop_column("sweep_id")
    with op.batch_alter_table("sweeps", schema=None) as batch_op:
        batch_op.drop_index("ix_sweeps_schedule_id")
        batch_op.drop_index("ix_sweeps_project_id_id")
        batch_op.drop_index("ix_sweeps_status")
    op.drop_table("sweeps")
