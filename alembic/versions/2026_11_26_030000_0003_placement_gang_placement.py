"""gang placement: per-job placement policy, node GPU ids, ports taken by others, port spaces

Revision ID: 0003_placement
Revises: 0001
Create Date: 2026-11-26 03:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0003_placement"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        # NULL: the cluster's default policy (COHORT_PLACEMENT_POLICY).
        batch_op.add_column(sa.Column("placement", sa.String(length=16), nullable=True))
    with op.batch_alter_table("nodes") as batch_op:
        batch_op.add_column(
            sa.Column("gpu_ids", sa.String(length=256), nullable=False, server_default="")
        )
        batch_op.add_column(sa.Column("busy_ports", sa.Text(), nullable=False, server_default=""))
        batch_op.add_column(
            sa.Column("port_space", sa.String(length=128), nullable=False, server_default="")
        )


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch_op:
        batch_op.drop_column("port_space")
        batch_op.drop_column("busy_ports")
        batch_op.drop_column("gpu_ids")
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("placement")
