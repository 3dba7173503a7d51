"""inputs: a job names files of its project's data for its replicas

Revision ID: 0010_inputs
Revises: 0009_bundles
Create Date: 2026-11-26 11:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0010_inputs"
down_revision: str | Sequence[str] | None = "0009_bundles"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("inputs", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("inputs")
