"""data files' content digests: what each path of a project's data held last

Revision ID: 0025_data_versions
Revises: 0024_mlflow_export
Create Date: 2026-11-29 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0025_data_versions"
down_revision: str | Sequence[str] | None = "0024_mlflow_export"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Files stored before this table have no row: services/jobs/data_versions.py hashes
    # them from the store the first time a digest under them is asked for.
    op.create_table(
        "data_files",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.String(length=1024), nullable=False),
        sa.Column("sha256", sa.String(length=80), nullable=True),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("store_version", sa.String(length=256), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("project_id", "path", name="uq_data_files_project_path"),
    )


def downgrade() -> None:
    op.drop_table("data_files")
