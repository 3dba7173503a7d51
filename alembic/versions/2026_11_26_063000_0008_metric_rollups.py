"""metric rollups: per-series sums over 100 steps, for long runs' charts

Revision ID: 0008_metric_rollups
Revises: 0007_series_without_fk
Create Date: 2026-11-26 06:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0008_metric_rollups"
down_revision: str | Sequence[str] | None = "0007_series_without_fk"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROLLUP_STEPS = 100  # services/telemetry/metrics.py's, as of this revision


def upgrade() -> None:
    op.create_table(
        "metric_rollups",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("replica", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("points", sa.Integer(), nullable=False),
        sa.Column("total", sa.Float(), nullable=False),
        sa.Column("first_step", sa.Integer(), nullable=False),
        sa.Column("last_step", sa.Integer(), nullable=False),
        sa.Column("last_epoch", sa.Integer(), nullable=True),
        sa.Column("last_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "attempt", "replica", "name", "bucket"),
    )
    # The points stored before this revision.
    op.execute(
        "INSERT INTO metric_rollups (job_id, attempt, replica, name, bucket, points, total, "
        "first_step, last_step, last_epoch, last_ts) "
        f"SELECT job_id, attempt, replica, name, step / {ROLLUP_STEPS}, count(*), sum(value), "
        "min(step), max(step), max(epoch), max(ts) FROM metric_points "
        f"GROUP BY job_id, attempt, replica, name, step / {ROLLUP_STEPS}"
    )


def downgrade() -> None:
    op.drop_table("metric_rollups")
