"""bundles: code bundles per project; jobs get bundle, command, env, progress timeout

Revision ID: 0009_bundles
Revises: 0008_metric_rollups
Create Date: 2026-11-26 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0009_bundles"
down_revision: str | Sequence[str] | None = "0008_metric_rollups"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "bundles",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=71), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("project_id", "digest", name="uq_bundles_project_digest"),
    )
    with op.batch_alter_table("jobs") as batch_op:
        # A command job names no trainer.
        batch_op.alter_column("trainer", existing_type=sa.String(length=256), nullable=True)
        batch_op.add_column(sa.Column("command", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("bundle", sa.String(length=71), nullable=True))
        batch_op.add_column(sa.Column("env", sa.JSON(), nullable=False, server_default="{}"))
        batch_op.add_column(sa.Column("progress_timeout_seconds", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.execute("DELETE FROM jobs WHERE trainer IS NULL")
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("progress_timeout_seconds")
        batch_op.drop_column("env")
        batch_op.drop_column("bundle")
        batch_op.drop_column("command")
        batch_op.alter_column("trainer", existing_type=sa.String(length=256), nullable=False)
    op.drop_table("bundles")
