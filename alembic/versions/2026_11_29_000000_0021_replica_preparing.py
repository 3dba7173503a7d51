"""replica_preparing: what a pending replica's agent is doing before its start

Revision ID: 0021_replica_preparing
Revises: 0020_requirements
Create Date: 2026-11-29 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0021_replica_preparing"
down_revision: str | Sequence[str] | None = "0020_requirements"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("replicas") as batch:
        batch.add_column(sa.Column("preparing", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("replicas") as batch:
        batch.drop_column("preparing")
