"""merge the failure-handling, placement, schedules and streams branches

Revision ID: 0006_merge
Revises: 0002_failures, 0003_placement, 0004_schedules, 0005_streams
Create Date: 2026-11-26 03:40:00
"""

from collections.abc import Sequence

revision: str = "0006_merge"
down_revision: str | Sequence[str] | None = (
    "0002_failures",
    "0003_placement",
    "0004_schedules",
    "0005_streams",
)
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
