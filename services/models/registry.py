"""Tables of the model registry: named models, their numbered versions, aliases and every
move of an alias."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from services.models.base import Base, utcnow


class RegisteredModel(Base):
    """A named model of a project; `latest_version` is the last number handed out (versions
    are numbered under this row's lock, so two registrations never take the same one)."""

    __tablename__ = "registered_models"
    __table_args__ = (
        sa.UniqueConstraint("project_id", "name", name="uq_registered_models_project_name"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(sa.ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(64))
    latest_version: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class ModelVersion(Base):
    """One version of a model: the job that made it and its lineage, copied when it was
    registered (services/registry/schemas.py: Lineage), so it outlives the job's row."""

    __tablename__ = "model_versions"
    __table_args__ = (
        sa.UniqueConstraint("model_id", "version", name="uq_model_versions_model_version"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(sa.ForeignKey("registered_models.id", ondelete="CASCADE"))
    version: Mapped[int]
    # The job whose model this is. No ON DELETE: a registered job is never deleted (the
    # schedules' history limits skip it), so its model files stay where it wrote them.
    # Checked at commit: a project deleted with its jobs and models (one statement whose
    # cascades reach the jobs first) is not refused midway.
    job_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("jobs.id", deferrable=True, initially="DEFERRED"), index=True
    )
    # The model's prefix in the artifact store (jobs/<id>/model).
    artifact: Mapped[str] = mapped_column(sa.String(1024))
    lineage: Mapped[dict[str, Any]] = mapped_column(sa.JSON, default=dict)
    registered_by: Mapped[str] = mapped_column(sa.String(128))
    registered_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class ModelAlias(Base):
    """A name (`production`, `staging`, ...) pointing at one version of a model."""

    __tablename__ = "model_aliases"
    __table_args__ = (sa.UniqueConstraint("model_id", "name", name="uq_model_aliases_model_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(sa.ForeignKey("registered_models.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(64))
    version: Mapped[int]
    updated_by: Mapped[str] = mapped_column(sa.String(128))
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class AliasMove(Base):
    """One move of an alias: from which version (None: the alias was created) to which,
    by whom and why. Written in the transaction that moves the alias."""

    __tablename__ = "model_alias_moves"
    __table_args__ = (sa.Index("ix_model_alias_moves_alias", "alias_id", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    alias_id: Mapped[int] = mapped_column(sa.ForeignKey("model_aliases.id", ondelete="CASCADE"))
    from_version: Mapped[int | None]
    to_version: Mapped[int]
    moved_by: Mapped[str] = mapped_column(sa.String(128))
    reason: Mapped[str] = mapped_column(sa.Text, default="")
    moved_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
