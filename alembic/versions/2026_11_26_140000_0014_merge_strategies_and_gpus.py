"""merge the strategies and GPU-inventory branches

Revision ID: 0014_merge
Revises: 0011_strategies, 0013_gpus
Create Date: 2026-11-26 14:00:00
"""

from collections.abc import Sequence

revision: str = "0014_merge"
down_revision: str | Sequence[str] | None = ("0011_strategies", "0013_gpus")
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
