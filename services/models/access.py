"""Tables of who may call the api: API tokens (with their scopes and lifetime) and the
dashboard's login sessions. Only digests of secrets are stored, never a secret."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from services.models.base import Base, utcnow
from services.models.jobs import Project


class ApiToken(Base):
    """An API token of a project: what it may do (`scopes`, services/auth/scopes.py) and
    until when; only its SHA-256 is stored."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(sa.ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(64))
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    # Scope names, e.g. ["read", "submit"]; "admin" holds every scope.
    scopes: Mapped[list[str]] = mapped_column(sa.JSON)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[dt.datetime | None]  # None: never
    revoked_at: Mapped[dt.datetime | None]
    # Refreshed at most once a minute (services/auth/tokens.py): a write per request
    # would make every GET a write.
    last_used_at: Mapped[dt.datetime | None]
    # Registered from COHORT_BOOTSTRAP_TOKEN: a new value revokes the row marked so before.
    bootstrap: Mapped[bool] = mapped_column(default=False)

    project: Mapped[Project] = relationship(lazy="joined")


class DashboardSession(Base):
    """A dashboard login: the cookie holds a random id whose SHA-256 is `id_hash`; it
    stands for its token until it expires, is logged out, or its token is revoked."""

    __tablename__ = "dashboard_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    token_id: Mapped[int] = mapped_column(
        sa.ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True
    )
    id_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[dt.datetime]
    revoked_at: Mapped[dt.datetime | None]

    token: Mapped[ApiToken] = relationship(lazy="joined")
