"""The table of a project's data files' contents: what each file under `data/` held last."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from services.models.base import Base, utcnow


class DataFileRecord(Base):
    """One path of a project's data: its content digest and the store's version of it.

    A deleted file keeps its row (`sha256` NULL) so that the newest change under a prefix,
    which data-triggered schedules watch, also sees deletions."""

    __tablename__ = "data_files"
    __table_args__ = (sa.UniqueConstraint("project_id", "path", name="uq_data_files_project_path"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(sa.ForeignKey("projects.id", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(sa.String(1024))  # relative to the project's data
    sha256: Mapped[str | None] = mapped_column(sa.String(80))  # "sha256:<hex>"; NULL: deleted
    size: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    # The store's version when the digest was taken (S3's ETag, a local inode and mtime):
    # a file changed behind Cohort's back is hashed again.
    store_version: Mapped[str] = mapped_column(sa.String(256), default="")
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
