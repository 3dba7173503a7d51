"""an index of each project's queued jobs by priority (the admission's quota count)

Revision ID: 0033_queued_by_project
Revises: 0032_stragglers
Create Date: 2026-12-01 04:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0033_queued_by_project"
down_revision: str | Sequence[str] | None = "0032_stragglers"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_jobs_queued_project_priority",
        "jobs",
        ["project_id", "priority"],
        postgresql_where=sa.text("status = 'queued'"),
        sqlite_where=sa.text("status = 'queued'"),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_queued_project_priority", table_name="jobs")
