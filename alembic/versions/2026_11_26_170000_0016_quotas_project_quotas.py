"""quotas: per-project limits over the cluster's defaults

Revision ID: 0016_quotas
Revises: 0012_sweeps
Create Date: 2026-11-26 17:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0016_quotas"
down_revision: str | Sequence[str] | None = "0012_sweeps"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "project_quotas",
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("max_queued_jobs", sa.Integer(), nullable=True),
        sa.Column("max_running_replicas", sa.Integer(), nullable=True),
        sa.Column("max_gpus", sa.Integer(), nullable=True),
        sa.Column("max_schedules", sa.Integer(), nullable=True),
        sa.Column("max_priority", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project_id"),
    )


def downgrade() -> None:
    op.drop_table("project_quotas")
