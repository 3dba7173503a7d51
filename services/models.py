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
        # Exactly once per fire time of a schedule, however many schedulers race.
        sa.UniqueConstraint("schedule_id", "scheduled_for", name="uq_jobs_schedule_fire"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(sa.ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(128))
    # Exactly one of `trainer` (a built-in or `module:function`) and `command` (argv).
    trainer: Mapped[str | None] = mapped_column(sa.String(256))
    command: Mapped[list[str] | None] = mapped_column(sa.JSON)
    # The code bundle ("sha256:<hex>") unpacked into each replica's working directory.
    bundle: Mapped[str | None] = mapped_column(sa.String(71))
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)  # NAME -> value, validated
    # Local file name -> "data/<path>" of the project's data, fetched before each start.
    inputs: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # None: the cluster's PROGRESS_TIMEOUT; 0: no progress watchdog.
    progress_timeout_seconds: Mapped[int | None]
    strategy: Mapped[str] = mapped_column(sa.String(32))
    replicas: Mapped[int]
    gpus_per_replica: Mapped[int] = mapped_column(default=0)
    hyperparameters: Mapped[dict[str, Any]] = mapped_column(default=dict)
    restart_policy: Mapped[str] = mapped_column(sa.String(16), default="never")
    max_restarts: Mapped[int] = mapped_column(default=0)
    priority: Mapped[int] = mapped_column(default=0)
    # "pack" or "spread" (services/cluster/placement.py); NULL: the cluster's default.
    placement: Mapped[str | None] = mapped_column(sa.String(16))
    # Failure handling (see services/cluster/gangs.py): the job fails once this many
    # seconds have passed since submission; its scratch files go this long after
    # it finished; a restarted gang is not placed again before `not_before`.
    active_deadline_seconds: Mapped[int | None]
    ttl_seconds_after_finished: Mapped[int | None]
    not_before: Mapped[dt.datetime | None]
    cleaned_at: Mapped[dt.datetime | None]
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
    # Set on jobs a schedule fired (services/retraining/schedules.py); NULL for submitted jobs.
    schedule_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("schedules.id", ondelete="SET NULL"), index=True)
    scheduled_for: Mapped[dt.datetime | None]

    project: Mapped[Project] = relationship(lazy="joined")
    replica_rows: Mapped[list[Replica]] = relationship(
        back_populates="job", lazy="raise", order_by="(Replica.attempt, Replica.index)"
    )


class Bundle(Base):
    """A code bundle a project uploaded; its bytes are stored once per digest, in the
    artifact store (services/storage), whichever projects uploaded them."""

    __tablename__ = "bundles"
    __table_args__ = (
        sa.UniqueConstraint("project_id", "digest", name="uq_bundles_project_digest"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(sa.ForeignKey("projects.id", ondelete="CASCADE"))
    digest: Mapped[str] = mapped_column(sa.String(71))  # "sha256:<64 hex>"
    size: Mapped[int] = mapped_column(sa.BigInteger)
    files: Mapped[int]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


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
    # Why Cohort ended it when no exit code tells (lost node, no progress).
    failure: Mapped[str] = mapped_column(sa.Text, default="")
    progress_at: Mapped[dt.datetime | None]  # last progress heartbeat seen
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
        sa.Index("ix_metric_points_job_id_id", "job_id", "id"),  # live streams follow by id
    )

    id: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer, "sqlite"),
                                    primary_key=True)
    # No foreign key: the ingest locks the batch's job rows instead (FOR KEY SHARE, once
    # per job rather than per row), and services/jobs.delete_jobs deletes a job's series.
    job_id: Mapped[int]
    attempt: Mapped[int]
    replica: Mapped[int]
    step: Mapped[int]
    epoch: Mapped[int | None]
    name: Mapped[str] = mapped_column(sa.String(64))
    value: Mapped[float] = mapped_column(sa.Float)
    ts: Mapped[float] = mapped_column(sa.Float)  # unix time the replica observed it


class MetricRollup(Base):
    """Sums of the points of one series over ROLLUP_STEPS steps (`bucket` = step // it),
    kept by the ingest alongside the points (services/telemetry/metrics.py): a long run's chart
    reads about 1/ROLLUP_STEPS of the rows. Exact: only newly stored points are added."""

    __tablename__ = "metric_rollups"

    job_id: Mapped[int] = mapped_column(primary_key=True)  # no foreign key, as points
    attempt: Mapped[int] = mapped_column(primary_key=True)
    replica: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    bucket: Mapped[int] = mapped_column(primary_key=True)
    points: Mapped[int]
    total: Mapped[float] = mapped_column(sa.Float)  # sum of the values
    first_step: Mapped[int]
    last_step: Mapped[int]
    last_epoch: Mapped[int | None]
    last_ts: Mapped[float] = mapped_column(sa.Float)


class LogLine(Base):
    """One line a replica printed (stdout and stderr); `(job, attempt, replica, seq)` once."""

    __tablename__ = "log_lines"
    __table_args__ = (
        sa.UniqueConstraint("job_id", "attempt", "replica", "seq", name="uq_log_line"),
        sa.Index("ix_log_lines_job_id_id", "job_id", "id"),
    )

    id: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer, "sqlite"),
                                    primary_key=True)
    # No foreign key: the ingest locks the batch's job rows instead (FOR KEY SHARE, once
    # per job rather than per row), and services/jobs.delete_jobs deletes a job's series.
    job_id: Mapped[int]
    attempt: Mapped[int]
    replica: Mapped[int]
    seq: Mapped[int]  # line number in the replica's log file, from 1
    ts: Mapped[float] = mapped_column(sa.Float)  # unix time the agent read the line
    line: Mapped[str] = mapped_column(sa.Text)


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
    # The GPU ids the agent found ("0,1"), and ports of its range that other
    # processes hold ("29500,29511"): placement hands out neither twice.
    gpu_ids: Mapped[str] = mapped_column(sa.String(256), default="")
    busy_ports: Mapped[str] = mapped_column(sa.Text, default="")
    # Agents that share one network stack (one host, one namespace) share its ports.
    port_space: Mapped[str] = mapped_column(sa.String(128), default="")


class Schedule(Base):
    """A retraining schedule: a job template fired on a cron expression or an interval."""

    __tablename__ = "schedules"
    __table_args__ = (
        sa.UniqueConstraint("project_id", "name", name="uq_schedules_project_name"),
        sa.Index("ix_schedules_due", "paused", "next_fire_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(sa.ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(64))
    job_template: Mapped[dict[str, Any]] = mapped_column(default=dict)
    cron: Mapped[str | None] = mapped_column(sa.String(128))
    interval_seconds: Mapped[int | None]
    timezone: Mapped[str] = mapped_column(sa.String(64), default="UTC")
    concurrency_policy: Mapped[str] = mapped_column(sa.String(16), default="allow")
    starting_deadline_seconds: Mapped[int | None]
    successful_jobs_history_limit: Mapped[int | None]
    failed_jobs_history_limit: Mapped[int | None]
    paused: Mapped[bool] = mapped_column(default=False)
    next_fire_at: Mapped[dt.datetime | None]
    last_fired_at: Mapped[dt.datetime | None]
    last_outcome: Mapped[str] = mapped_column(sa.String(32), default="")
    promote_metric: Mapped[str | None] = mapped_column(sa.String(64))
    promote_mode: Mapped[str] = mapped_column(sa.String(8), default="max")
    promoted_job_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("jobs.id", ondelete="SET NULL", use_alter=True,
                      name="fk_schedules_promoted_job"))
    promoted_value: Mapped[float | None] = mapped_column(sa.Float)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    project: Mapped[Project] = relationship(lazy="joined")


class ScheduleRun(Base):
    """The record of one fire time of a schedule: what happened, and the promotion decision."""

    __tablename__ = "schedule_runs"
    __table_args__ = (
        sa.UniqueConstraint("schedule_id", "scheduled_for", name="uq_schedule_runs_fire"),
        sa.Index("ix_schedule_runs_pending", "decision"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    schedule_id: Mapped[int] = mapped_column(sa.ForeignKey("schedules.id", ondelete="CASCADE"))
    scheduled_for: Mapped[dt.datetime]
    job_id: Mapped[int | None] = mapped_column(sa.ForeignKey("jobs.id", ondelete="SET NULL"))
    outcome: Mapped[str] = mapped_column(sa.String(32))  # fired, triggered, skipped, missed
    reason: Mapped[str] = mapped_column(sa.Text, default="")
    # Promotion: pending until the job ends; then promoted, kept, no_metric or not_eligible.
    decision: Mapped[str | None] = mapped_column(sa.String(16))
    metric_value: Mapped[float | None] = mapped_column(sa.Float)
    decision_reason: Mapped[str] = mapped_column(sa.Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    decided_at: Mapped[dt.datetime | None]
