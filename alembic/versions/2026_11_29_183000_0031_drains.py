"""drains: a replica asked to checkpoint now, and a job's attempts moved off drained nodes

Revision ID: 0031_drains
Revises: 0030_node_cordon
Create Date: 2026-11-29 18:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0031_drains"
down_revision: str | Sequence[str] | None = "0030_node_cordon"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("replicas") as batch:
        batch.add_column(
            sa.Column("checkpoint_requested_at", sa.DateTime(timezone=True), nullable=True)
        )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("moved_attempts", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("moved_attempts")
    with op.batch_alter_table("replicas") as batch:
        batch.drop_column("checkpoint_requested_at")
