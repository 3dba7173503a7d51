"""fence: the scheduler's fencing token (one row)

Revision ID: 0018_fence
Revises: 0017_merge
Create Date: 2026-11-27 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0018_fence"
down_revision: str | Sequence[str] | None = "0017_merge"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    fence = op.create_table(
        "scheduler_fence",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    # The one row every leader's transaction checks; no leader has a token yet.
    op.bulk_insert(fence, [{"id": 1, "token": 0}])


def downgrade() -> None:
    op.drop_table("scheduler_fence")
