"""strategies: a job's parameter_server roles, distribution options and profile; each
replica's role

Revision ID: 0011_strategies
Revises: 0010_inputs
Create Date: 2026-11-26 13:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0011_strategies"
down_revision: str | Sequence[str] | None = "0010_inputs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("roles", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("role_placement", sa.JSON(), nullable=True))
        batch_op.add_column(
            sa.Column("distribution", sa.JSON(), nullable=False, server_default="{}")
        )
        batch_op.add_column(sa.Column("profile", sa.JSON(), nullable=True))
    with op.batch_alter_table("replicas") as batch_op:
        batch_op.add_column(
            sa.Column("role", sa.String(16), nullable=False, server_default="worker")
        )
        batch_op.add_column(
            sa.Column("role_index", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("restarts", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("replicas") as batch_op:
        batch_op.drop_column("restarts")
        batch_op.drop_column("role_index")
        batch_op.drop_column("role")
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("profile")
        batch_op.drop_column("distribution")
        batch_op.drop_column("role_placement")
        batch_op.drop_column("roles")
