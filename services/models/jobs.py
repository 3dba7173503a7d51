"""Tables of projects and their jobs: projects, jobs, code bundles, replicas, the job
event log, the nodes replicas run on, and the stragglers found among replicas."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from services.models.base import Base, enum_column, utcnow
from services.statuses import JobStatus, NodeCordon, NodeStatus, ReplicaStatus


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        sa.UniqueConstraint("project_id", "idempotency_key", name="uq_jobs_project_idempotency"),
        sa.Index("ix_jobs_status_priority", "status", "priority", "id"),
        sa.Index("ix_jobs_project_id_id", "project_id", "id"),
        # A project's queued jobs by priority: what every admission counts under its
        # project's lock (services/jobs/quotas.py queued_by_priority), read from this index
        # alone instead of every job of the project.
        sa.Index(
            "ix_jobs_queued_project_priority",
            "project_id",
            "priority",
            postgresql_where=sa.text("status = 'queued'"),
            sqlite_where=sa.text("status = 'queued'"),
        ),
        # Exactly once per fire time of a schedule, however many schedulers race.
        sa.UniqueConstraint("schedule_id", "scheduled_for", name="uq_jobs_schedule_fire"),
        # One job per trial of a sweep; the sweep pass counts a sweep's jobs by status.
        sa.UniqueConstraint("sweep_id", "trial_index", name="uq_jobs_sweep_trial"),
        sa.Index("ix_jobs_sweep_id_status", "sweep_id", "status"),
    )
    # Server defaults (moved_attempts) are read when first used, not RETURNed by every
    # insert: an insert names only the columns it sets (see moved_attempts).
    __mapper_args__ = {"eager_defaults": False}

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(sa.ForeignKey("projects.id", ondelete="CASCADE"))
    # From `name` to `ttl_seconds_after_finished`: a column per field of the job spec
    # (services/jobs/spec.py), of the same name, filled from it by `stored_columns`;
    # tests/unit/test_job_spec.py fails when one has no counterpart in the other.
    name: Mapped[str] = mapped_column(sa.String(128))
    # Exactly one of `trainer` (a built-in or `module:function`) and `command` (argv).
    trainer: Mapped[str | None] = mapped_column(sa.String(256))
    command: Mapped[list[str] | None] = mapped_column(sa.JSON)
    # The code bundle ("sha256:<hex>") unpacked into each replica's working directory.
    bundle: Mapped[str | None] = mapped_column(sa.String(71))
    # An image reference: the replicas run as its containers (NULL: as processes).
    image: Mapped[str | None] = mapped_column(sa.String(255))
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)  # NAME -> value, validated
    # Requirement lines as the job gave them in `pip` (normalised: services/wire/requirements.py).
    pip: Mapped[list[str]] = mapped_column(sa.JSON, default=list)
    # Local file name -> "data/<path>" of the project's data, fetched before each start.
    inputs: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # None: the cluster's PROGRESS_TIMEOUT; 0: no progress watchdog.
    progress_timeout_seconds: Mapped[int | None]
    strategy: Mapped[str] = mapped_column(sa.String(32))
    replicas: Mapped[int]
    gpus_per_replica: Mapped[int] = mapped_column(default=0)
    # parameter_server: {"chief": 1, "worker": N, "ps": M, "evaluator": 0|1} and
    # {"chief"|"ps": "any"|"separate"}; NULL for the other strategies.
    roles: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    role_placement: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    # services/wire/replica.DistributionOptions as a dict; {} for jobs stored before it.
    distribution: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # {"steps": [first, last], "replicas": [indexes]}, or NULL: no profile.
    profile: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
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
    # The normalised requirement lines its environment installs, one per line: its `pip`,
    # or its bundle's requirements.txt read at submission ("" for none).
    requirements: Mapped[str] = mapped_column(sa.Text, default="")

    status: Mapped[JobStatus] = mapped_column(enum_column(JobStatus), default=JobStatus.QUEUED)
    attempt: Mapped[int] = mapped_column(default=1)
    # Attempts that ended because a node of theirs was drained (services/cluster/drains.py):
    # the gang moved, it did not fail, so they do not count against max_restarts. A server
    # default alone: a job inserted leaves it out, so a database one migration behind (the
    # migration tests' older revisions) still takes today's inserts.
    moved_attempts: Mapped[int] = mapped_column(server_default="0")
    reason: Mapped[str] = mapped_column(sa.Text, default="")
    result: Mapped[dict[str, Any]] = mapped_column(default=dict)

    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]
    # Set on jobs a schedule fired (services/retraining/schedules.py); NULL for submitted jobs.
    schedule_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("schedules.id", ondelete="SET NULL"), index=True
    )
    scheduled_for: Mapped[dt.datetime | None]
    # The variables of the schedule fire that made it (COHORT_SCHEDULED_FOR, the data
    # interval or version: services/retraining/fire_env.py), or of its sweep's; each
    # replica gets them after the job's own `env`.
    # NULL, without a default, for rows no schedule made: their INSERT leaves it out.
    schedule_env: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    # Set on the trials of a sweep (services/sweeps/); NULL for other jobs.
    sweep_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("sweeps.id", ondelete="SET NULL", use_alter=True, name="fk_jobs_sweep_id")
    )
    trial_index: Mapped[int | None]
    # An evaluation job's files (services/retraining/evaluation.py): {"model": {relpath:
    # store key}, "holdout": {relpath: store key}}, fetched read-only; NULL for other jobs.
    evaluation: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)

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
        # Quarantine reads the failed and lost replicas of its window (cluster/quarantine.py).
        sa.Index(
            "ix_replicas_failed_finished",
            "finished_at",
            postgresql_where=sa.text("status IN ('failed', 'lost')"),
            sqlite_where=sa.text("status IN ('failed', 'lost')"),
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(sa.ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int]
    index: Mapped[int]
    node_id: Mapped[str] = mapped_column(sa.ForeignKey("nodes.id"))
    address: Mapped[str] = mapped_column(sa.String(128))
    port: Mapped[int]
    gpu_ids: Mapped[str] = mapped_column(sa.String(64), default="")
    # Its part in the gang (services/cluster/tf_config.gang_roles) and its index among that role's.
    role: Mapped[str] = mapped_column(sa.String(16), default="worker")
    role_index: Mapped[int] = mapped_column(default=0)
    # Times its agent started its process again in place (a parameter_server worker).
    restarts: Mapped[int] = mapped_column(default=0)
    tf_config: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    status: Mapped[ReplicaStatus] = mapped_column(
        enum_column(ReplicaStatus), default=ReplicaStatus.PENDING
    )
    pid: Mapped[int | None]
    exit_code: Mapped[int | None]
    log_tail: Mapped[str] = mapped_column(sa.Text, default="")
    # Why Cohort ended it when no exit code tells (lost node, no progress).
    failure: Mapped[str] = mapped_column(sa.Text, default="")
    # What its agent is doing before its start ("installing 3 packages: ..."); cleared at it.
    preparing: Mapped[str] = mapped_column(sa.Text, default="")
    progress_at: Mapped[dt.datetime | None]  # last progress heartbeat seen
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    dispatched_at: Mapped[dt.datetime | None]  # last start message sent
    stop_requested_at: Mapped[dt.datetime | None]  # last stop message sent
    # When its gang was asked to checkpoint now, a node of it being drained (drains.py).
    checkpoint_requested_at: Mapped[dt.datetime | None]
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]

    job: Mapped[Job] = relationship(back_populates="replica_rows", lazy="raise")


class JobEvent(Base):
    """An append-only record of one status change, with its reason."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(sa.ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int]
    from_status: Mapped[JobStatus | None] = mapped_column(enum_column(JobStatus))
    to_status: Mapped[JobStatus] = mapped_column(enum_column(JobStatus))
    reason: Mapped[str] = mapped_column(sa.Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # The job's newest metric point and log line when this change was stored: the job's
    # stream sends the rows up to them before this event and the rest after it
    # (services/telemetry/stream_order.py). None on events stored before they existed.
    metric_mark: Mapped[int | None] = mapped_column(sa.BigInteger)
    log_mark: Mapped[int | None] = mapped_column(sa.BigInteger)


class Node(Base):
    """A machine running a node agent."""

    __tablename__ = "nodes"

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    address: Mapped[str] = mapped_column(sa.String(128))
    slots: Mapped[int]
    gpus: Mapped[int] = mapped_column(default=0)
    status: Mapped[NodeStatus] = mapped_column(enum_column(NodeStatus), default=NodeStatus.READY)
    last_heartbeat: Mapped[dt.datetime] = mapped_column(default=utcnow)
    registered_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # The GPU ids the agent found ("0,1"), and ports of its range that other
    # processes hold ("29500,29511"): placement hands out neither twice.
    gpu_ids: Mapped[str] = mapped_column(sa.String(256), default="")
    busy_ports: Mapped[str] = mapped_column(sa.Text, default="")
    # Agents that share one network stack (one host, one namespace) share its ports.
    port_space: Mapped[str] = mapped_column(sa.String(128), default="")
    # Per GPU offered, in gpu_ids' order: [{"index", "name", "memory_mb"}] (what the
    # nodes API and the cluster page show).
    gpu_inventory: Mapped[list[dict[str, Any]]] = mapped_column(sa.JSON, default=list)
    # The container engine its agent runs image jobs' replicas with ("docker", "podman");
    # "": none, and placement puts no job with an `image` here.
    container_engine: Mapped[str] = mapped_column(sa.String(16), default="")
    # Set: placement puts nothing new here (drained or quarantined), whatever its status;
    # the reason and time are what the nodes API, CLI and cluster page show.
    cordon: Mapped[NodeCordon | None] = mapped_column(enum_column(NodeCordon), default=None)
    cordon_reason: Mapped[str] = mapped_column(sa.Text, default="")
    cordoned_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    # When a cordon was last lifted: failures and stragglers before it no longer count
    # towards quarantining the node (services/cluster/quarantine.py).
    cordon_lifted_at: Mapped[dt.datetime | None] = mapped_column(default=None)


class Straggler(Base):
    """A replica named a straggler: its busy time per step stayed above the factor times
    its peers' median for the steps the settings ask (services/cluster/stragglers.py).
    Named once per attempt; rows stay when their job is deleted (no foreign key), as the
    Prometheus counter of stragglers by node is read from them."""

    __tablename__ = "stragglers"
    __table_args__ = (
        sa.UniqueConstraint("job_id", "attempt", "replica", name="uq_stragglers_replica"),
        sa.Index("ix_stragglers_node_found", "node_id", "found_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int]
    attempt: Mapped[int]
    replica: Mapped[int]
    node_id: Mapped[str] = mapped_column(sa.String(64))
    first_step: Mapped[int]  # the slow run of steps, first to last
    last_step: Mapped[int]
    busy_step_time: Mapped[float] = mapped_column(sa.Float)  # its own, seconds per step
    peers_step_time: Mapped[float] = mapped_column(sa.Float)  # its peers' median
    found_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
