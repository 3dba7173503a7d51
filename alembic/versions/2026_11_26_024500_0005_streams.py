"""log lines, and an index for following a job's metrics by id

Revision ID: 0005_streams
Revises: 0001
Create Date: 2026-11-26 02:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0005_streams"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "log_lines",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("replica", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("line", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "attempt", "replica", "seq", name="uq_log_line"),
    )
    with op.batch_alter_table("log_lines", schema=None) as batch_op:
        batch_op.create_index("ix_log_lines_job_id_id", ["job_id", "id"], unique=False)
    with op.batch_alter_table("metric_points", schema=None) as batch_op:
        batch_op.create_index("ix_metric_points_job_id_id", ["job_id", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("metric_points", schema=None) as batch_op:
        batch_op.drop_index("ix_metric_points_job_id_id")
    with op.batch_alter_table("log_lines", schema=None) as batch_op:
        batch_op.drop_index("ix_log_lines_job_id_id")
    op.drop_table("log_lines")
