"""an image per job: the job's image, and the container engine of each node's agent

Revision ID: 0022_image_jobs
Revises: 0021_replica_preparing
Create Date: 2026-11-29 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0022_image_jobs"
down_revision: str | Sequence[str] | None = "0021_replica_preparing"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # NULL for the jobs stored before: processes, as they ran. A node's engine is ""
    # until its agent's next beat says which it has.
    op.add_column("jobs", sa.Column("image", sa.String(length=255), nullable=True))
    op.add_column(
        "nodes",
        sa.Column("container_engine", sa.String(length=16), nullable=False, server_default=""),
    )


def downgrade() -> None:
    op.drop_column("nodes", "container_engine")
    op.drop_column("jobs", "image")
