"""auth: token scopes, expiry, revocation, last use and the bootstrap mark; dashboard
sessions (the login cookie holds a session id, never the token)

Revision ID: 0015_auth
Revises: 0012_sweeps
Create Date: 2026-11-26 17:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0015_auth"
down_revision: str | Sequence[str] | None = "0012_sweeps"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

tokens = sa.table(
    "api_tokens",
    sa.column("is_admin", sa.Boolean()),
    sa.column("name", sa.String()),
    sa.column("scopes", sa.JSON()),
    sa.column("bootstrap", sa.Boolean()),
)


def upgrade() -> None:
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("scopes", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(
            sa.Column("bootstrap", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    # What each token could do before scopes: an admin everything, any other token all
    # but admin. The api registered COHORT_BOOTSTRAP_TOKEN as the admin token "bootstrap".
    op.execute(tokens.update().where(tokens.c.is_admin.is_(True)).values(scopes=["admin"]))
    op.execute(
        tokens.update()
        .where(tokens.c.is_admin.is_(False))
        .values(scopes=["read", "submit", "schedules"])
    )
    op.execute(
        tokens.update()
        .where(tokens.c.is_admin.is_(True), tokens.c.name == "bootstrap")
        .values(bootstrap=True)
    )
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.alter_column("scopes", existing_type=sa.JSON(), nullable=False)
        batch_op.drop_column("is_admin")

    op.create_table(
        "dashboard_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=False),
        sa.Column("id_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["token_id"], ["api_tokens.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("id_hash"),
    )
    with op.batch_alter_table("dashboard_sessions", schema=None) as batch_op:
        batch_op.create_index("ix_dashboard_sessions_token_id", ["token_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("dashboard_sessions", schema=None) as batch_op:
        batch_op.drop_index("ix_dashboard_sessions_token_id")
    op.drop_table("dashboard_sessions")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("is_admin", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.execute(
        tokens.update()
        .where(sa.cast(tokens.c.scopes, sa.Text).like('%"admin"%'))
        .values(is_admin=True)
    )
    # The old schema cannot say "revoked" or "expired": such a token must not come back.
    op.execute(
        sa.text("DELETE FROM api_tokens WHERE revoked_at IS NOT NULL OR expires_at IS NOT NULL")
    )
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_column("bootstrap")
        batch_op.drop_column("last_used_at")
        batch_op.drop_column("revoked_at")
        batch_op.drop_column("expires_at")
        batch_op.drop_column("scopes")
