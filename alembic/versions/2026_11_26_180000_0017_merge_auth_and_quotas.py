"""merge the token-scopes and quotas branches

Revision ID: 0017_merge
Revises: 0015_auth, 0016_quotas
Create Date: 2026-11-26 18:00:00
"""

from collections.abc import Sequence

revision: str = "0017_merge"
down_revision: str | Sequence[str] | None = ("0015_auth", "0016_quotas")
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
