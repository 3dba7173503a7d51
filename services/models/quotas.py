"""The table of projects' quotas: an admin's limits for one project, over the cluster's
defaults (COHORT_QUOTA_*; services/jobs/quotas.py applies them)."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from services.models.base import Base, utcnow


class ProjectQuota(Base):
    """One project's limits; a NULL column means the cluster's default for it.

    A project without a row has every default.
    """

    __tablename__ = "project_quotas"

    project_id: Mapped[int] = mapped_column(
        sa.ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    max_queued_jobs: Mapped[int | None]
    max_running_replicas: Mapped[int | None]
    max_gpus: Mapped[int | None]
    max_schedules: Mapped[int | None]
    max_priority: Mapped[int | None]
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
