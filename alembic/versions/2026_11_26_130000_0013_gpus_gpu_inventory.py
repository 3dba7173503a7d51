"""gpus: each node's GPUs, model and memory, as its agent reports them

Revision ID: 0013_gpus
Revises: 0010_inputs
Create Date: 2026-11-26 13:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0013_gpus"
down_revision: str | Sequence[str] | None = "0010_inputs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch_op:
        batch_op.add_column(
            sa.Column("gpu_inventory", sa.JSON(), nullable=False, server_default="[]")
        )


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch_op:
        batch_op.drop_column("gpu_inventory")
