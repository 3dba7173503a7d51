"""nodes' cordon: drained or quarantined nodes take no new replicas

Revision ID: 0030_node_cordon
Revises: 0029_evaluations
Create Date: 2026-11-29 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0030_node_cordon"
down_revision: str | Sequence[str] | None = "0029_evaluations"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("cordon", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("cordon_reason", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("cordoned_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("cordoned_at")
        batch.drop_column("cordon_reason")
        batch.drop_column("cordon")
