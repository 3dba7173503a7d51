"""The scheduler's fencing token: one row, the token of the newest leadership term
(services/cluster/fencing.py issues and checks it)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from services.models.base import Base


class SchedulerFence(Base):
    """The newest leader's token. One row (id 1), made by the migration: a leader's
    transaction commits only while its own token is still this one."""

    __tablename__ = "scheduler_fence"

    id: Mapped[int] = mapped_column(primary_key=True)
    token: Mapped[int] = mapped_column(sa.BigInteger())
