"""failure handling: deadlines, TTL, restart backoff, replica failure and progress

Revision ID: 0002_failures
Revises: 0001
Create Date: 2026-11-26 02:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0002_failures"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("active_deadline_seconds", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("ttl_seconds_after_finished", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("not_before", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("cleaned_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("replicas") as batch_op:
        batch_op.add_column(sa.Column("failure", sa.Text(), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("progress_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("replicas") as batch_op:
        batch_op.drop_column("progress_at")
        batch_op.drop_column("failure")
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("cleaned_at")
        batch_op.drop_column("not_before")
        batch_op.drop_column("ttl_seconds_after_finished")
        batch_op.drop_column("active_deadline_seconds")
