"""the MLflow export: projects' tracking settings, where each project's export starts,
and each job's run with its cursor

Revision ID: 0024_mlflow_export
Revises: 0023_sweep_trials
Create Date: 2026-11-29 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0024_mlflow_export"
down_revision: str | Sequence[str] | None = "0023_sweep_trials"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "project_tracking",
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("tracking_uri", sa.String(length=1024), nullable=True),
        sa.Column("experiment", sa.String(length=256), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project_id"),
    )
    op.create_table(
        "tracking_starts",
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("tracking_uri", sa.String(length=1024), nullable=False),
        sa.Column("after_job_id", sa.Integer(), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project_id"),
    )
    op.create_table(
        "mlflow_runs",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("tracking_uri", sa.String(length=1024), nullable=False),
        sa.Column("experiment", sa.String(length=256), nullable=False),
        sa.Column("export_key", sa.String(length=32), nullable=False),
        sa.Column("experiment_id", sa.String(length=64), nullable=True),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("metric_cursor", sa.BigInteger(), nullable=False),
        sa.Column("points", sa.BigInteger(), nullable=False),
        sa.Column("status_logged", sa.String(length=16), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id"),
    )
    # Only the runs still open: the exporter reads them every round.
    op.create_index(
        "ix_mlflow_runs_open",
        "mlflow_runs",
        ["job_id"],
        unique=False,
        postgresql_where=sa.text("ended_at IS NULL"),
        sqlite_where=sa.text("ended_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_mlflow_runs_open", table_name="mlflow_runs")
    op.drop_table("mlflow_runs")
    op.drop_table("tracking_starts")
    op.drop_table("project_tracking")
