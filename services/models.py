"""SQLAlchemy 2 ORM models: projects, tokens, jobs, replicas, job events, metrics, nodes."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from services.statuses import JobStatus, NodeStatus, ReplicaStatus


def utcnow() -> dt.datetime:
    """The current time, timezone-aware in UTC."""
    return dt.datetime.now(dt.UTC)


class UTCDateTime(sa.types.TypeDecorator[dt.datetime]):
    """A timestamp that is always timezone-aware UTC, on PostgreSQL and on SQLite alike."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(dt.UTC) if value is not None else None

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is not None and value.tzinfo is None:  # SQLite drops the zone
            return value.replace(tzinfo=dt.UTC)
        return value


def _enum(enum_cls: type) -> sa.Enum:
    # Stored as plain strings (no native PostgreSQL enum), so both databases
    # share one migration and new values need no ALTER TYPE.
    return sa.Enum(enum_cls, native_enum=False, length=16,
                   values_callable=lambda e: [m.value for m in e])


class Base(DeclarativeBase):
    type_annotation_map = {dt.datetime: UTCDateTime, dict[str, Any]: sa.JSON}


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class ApiToken(Base):
    """An API token; only its SHA-256 is stored."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(sa.ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(64))
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    project: Mapped[Project] = relationship(lazy="joined")


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        sa.UniqueConstraint("project_id", "idempotency_key", name="uq_jobs_project_idempotency"),
        sa.Index("ix_jobs_status_priority", "status", "priority", "id"),
        sa.Index("ix_jobs_project_id_id", "project_id", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(sa.ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(128))
    trainer: Mapped[str] = mapped_column(sa.String(256))
    strategy: Mapped[str] = mapped_column(sa.String(32))
    replicas: Mapped[int]
    gpus_per_replica: Mapped[int] = mapped_column(default=0)
    hyperparameters: Mapped[dict[str, Any]] = mapped_column(default=dict)
    restart_policy: Mapped[str] = mapped_column(sa.String(16), default="never")
    max_restarts: Mapped[int] = mapped_column(default=0)
    priority: Mapped[int] = mapped_column(default=0)
    idempotency_key: Mapped[str | None] = mapped_column(sa.String(128))
    spec_hash: Mapped[str] = mapped_column(sa.String(64))

    status: Mapped[JobStatus] = mapped_column(_enum(JobStatus), default=JobStatus.QUEUED)
    attempt: Mapped[int] = mapped_column(default=1)
    reason: Mapped[str] = mapped_column(sa.Text, default="")
    result: Mapped[dict[str, Any]] = mapped_column(default=dict)

    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]

    project: Mapped[Project] = relationship(lazy="joined")
    replica_rows: Mapped[list[Replica]] = relationship(
        back_populates="job", lazy="raise", order_by="(Replica.attempt, Replica.index)"
    )


class Replica(Base):
    """One replica of one attempt of a job: where it runs and how it ended."""

    __tablename__ = "replicas"
    __table_args__ = (
        sa.UniqueConstraint("job_id", "attempt", "index", name="uq_replicas_job_attempt_index"),
        sa.Index("ix_replicas_node_status", "node_id", "status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(sa.ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int]
    index: Mapped[int]
    node_id: Mapped[str] = mapped_column(sa.ForeignKey("nodes.id"))
    address: Mapped[str] = mapped_column(sa.String(128))
    port: Mapped[int]
    gpu_ids: Mapped[str] = mapped_column(sa.String(64), default="")
    tf_config: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    status: Mapped[ReplicaStatus] = mapped_column(_enum(ReplicaStatus),
                                                  default=ReplicaStatus.PENDING)
    pid: Mapped[int | None]
    exit_code: Mapped[int | None]
    log_tail: Mapped[str] = mapped_column(sa.Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    dispatched_at: Mapped[dt.datetime | None]  # last start message sent
    stop_requested_at: Mapped[dt.datetime | None]  # last stop message sent
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]

    job: Mapped[Job] = relationship(back_populates="replica_rows", lazy="raise")


class JobEvent(Base):
    """An append-only record of one status change, with its reason."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(sa.ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int]
    from_status: Mapped[JobStatus | None] = mapped_column(_enum(JobStatus))
    to_status: Mapped[JobStatus] = mapped_column(_enum(JobStatus))
    reason: Mapped[str] = mapped_column(sa.Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class MetricPoint(Base):
    """One metric value; `(job, attempt, replica, step, name)` is stored once."""

    __tablename__ = "metric_points"
    __table_args__ = (
        sa.UniqueConstraint("job_id", "attempt", "replica", "step", "name", name="uq_metric_point"),
    )

    id: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer, "sqlite"),
                                    primary_key=True)
    job_id: Mapped[int] = mapped_column(sa.ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int]
    replica: Mapped[int]
    step: Mapped[int]
    epoch: Mapped[int | None]
    name: Mapped[str] = mapped_column(sa.String(64))
    value: Mapped[float] = mapped_column(sa.Float)
    ts: Mapped[float] = mapped_column(sa.Float)  # unix time the replica observed it


class Node(Base):
    """A machine running a node agent."""

    __tablename__ = "nodes"

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    address: Mapped[str] = mapped_column(sa.String(128))
    slots: Mapped[int]
    gpus: Mapped[int] = mapped_column(default=0)
    status: Mapped[NodeStatus] = mapped_column(_enum(NodeStatus), default=NodeStatus.READY)
    last_heartbeat: Mapped[dt.datetime] = mapped_column(default=utcnow)
    registered_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
