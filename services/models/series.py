"""Tables of what replicas report: metric points, their rollups, log lines."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from services.models.base import Base


class MetricPoint(Base):
    """One metric value; `(job, attempt, replica, step, name)` is stored once."""

    __tablename__ = "metric_points"
    __table_args__ = (
        sa.UniqueConstraint("job_id", "attempt", "replica", "step", "name", name="uq_metric_point"),
        sa.Index("ix_metric_points_job_id_id", "job_id", "id"),  # live streams follow by id
        # The leader reads the busy_step_time points stored since its last pass, a few
        # among thousands of others (services/cluster/stragglers.py).
        sa.Index(
            "ix_metric_points_busy_id",
            "id",
            postgresql_where=sa.text("name = 'busy_step_time'"),
            sqlite_where=sa.text("name = 'busy_step_time'"),
        ),
    )

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True
    )
    # No foreign key: the ingest locks the batch's job rows instead (FOR SHARE, once
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

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True
    )
    # No foreign key: the ingest locks the batch's job rows instead (FOR SHARE, once
    # per job rather than per row), and services/jobs.delete_jobs deletes a job's series.
    job_id: Mapped[int]
    attempt: Mapped[int]
    replica: Mapped[int]
    seq: Mapped[int]  # line number in the replica's log file, from 1
    ts: Mapped[float] = mapped_column(sa.Float)  # unix time the agent read the line
    line: Mapped[str] = mapped_column(sa.Text)
    # The job's newest metric point when this line was stored: the job's stream sends the
    # points up to it before this line (services/telemetry/stream_order.py).
    metric_mark: Mapped[int | None] = mapped_column(sa.BigInteger)
