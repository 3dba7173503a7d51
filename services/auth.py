"""Projects and API tokens: bootstrap, issue, authenticate. Tokens are stored hashed."""

from __future__ import annotations

import hashlib
import secrets

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.exceptions import Unauthorized
from services.models import ApiToken, Project

DEFAULT_PROJECT = "default"


def hash_token(token: str) -> str:
    """The stored form of a token (SHA-256: tokens are long random strings, not passwords)."""
    return hashlib.sha256(token.encode()).hexdigest()


def ensure_project(*, session: Session, name: str) -> Project:
    """The project called `name`, created if missing."""
    project = session.execute(sa.select(Project).where(Project.name == name)).scalar_one_or_none()
    if project is None:
        project = Project(name=name)
        session.add(project)
        session.flush()
    return project


def ensure_token(
    *, session: Session, token: str, project_name: str = DEFAULT_PROJECT, name: str = "bootstrap",
    is_admin: bool = True,
) -> ApiToken:
    """Register `token` (e.g. COHORT_BOOTSTRAP_TOKEN) for a project, once."""
    digest = hash_token(token)
    row = session.execute(
        sa.select(ApiToken).where(ApiToken.token_hash == digest)
    ).scalar_one_or_none()
    if row is None:
        project = ensure_project(session=session, name=project_name)
        row = ApiToken(project_id=project.id, name=name, token_hash=digest, is_admin=is_admin)
        session.add(row)
        session.flush()
    return row


def create_token(*, session: Session, project_name: str, name: str) -> str:
    """Issue a new random token for a project; returns the only copy of it."""
    token = "coh_" + secrets.token_urlsafe(32)
    ensure_token(session=session, token=token, project_name=project_name, name=name,
                 is_admin=False)
    return token


def authenticate(*, session: Session, token: str | None) -> ApiToken:
    """The token row for a bearer token.

    Raises:
        Unauthorized: no token, or an unknown one.
    """
    if not token:
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    row = session.execute(
        sa.select(ApiToken).where(ApiToken.token_hash == hash_token(token))
    ).scalar_one_or_none()
    if row is None:
        raise Unauthorized("unknown token: check COHORT_TOKEN or ask an admin for a token")
    return row
