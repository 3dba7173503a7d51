"""stragglers named among replicas, indexes of their figures by id and of failed
replicas by their end, and when a node's cordon was last lifted

Revision ID: 0032_stragglers
Revises: 0031_drains
Create Date: 2026-11-29 19:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0032_stragglers"
down_revision: str | Sequence[str] | None = "0031_drains"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stragglers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("replica", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("first_step", sa.Integer(), nullable=False),
        sa.Column("last_step", sa.Integer(), nullable=False),
        sa.Column("busy_step_time", sa.Float(), nullable=False),
        sa.Column("peers_step_time", sa.Float(), nullable=False),
        sa.Column("found_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "attempt", "replica", name="uq_stragglers_replica"),
    )
    op.create_index("ix_stragglers_node_found", "stragglers", ["node_id", "found_at"])
    op.create_index(
        "ix_metric_points_busy_id",
        "metric_points",
        ["id"],
        postgresql_where=sa.text("name = 'busy_step_time'"),
        sqlite_where=sa.text("name = 'busy_step_time'"),
    )
    op.create_index(
        "ix_replicas_failed_finished",
        "replicas",
        ["finished_at"],
        postgresql_where=sa.text("status IN ('failed', 'lost')"),
        sqlite_where=sa.text("status IN ('failed', 'lost')"),
    )
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("cordon_lifted_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("cordon_lifted_at")
    op.drop_index("ix_replicas_failed_finished", table_name="replicas")
    op.drop_index("ix_metric_points_busy_id", table_name="metric_points")
    op.drop_index("ix_stragglers_node_found", table_name="stragglers")
    op.drop_table("stragglers")
