"""requirements: a job's `pip` lines and the requirements its environment installs

Revision ID: 0020_requirements
Revises: 0019_stream_order
Create Date: 2026-11-28 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0020_requirements"
down_revision: str | Sequence[str] | None = "0019_stream_order"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Server defaults fill the rows stored before: no requirements, the node's interpreter.
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("pip", sa.JSON(), nullable=False, server_default="[]"))
        batch.add_column(sa.Column("requirements", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("requirements")
        batch.drop_column("pip")
