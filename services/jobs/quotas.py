"""Projects' quotas: the limits in force, what a project holds, and every quota check.

Where each limit acts (docs/scheduling.md, "Quotas and fair sharing"):

* `max_queued_jobs`, `max_schedules`: counted when a job or a schedule is created, under
  a lock on the project's row, so concurrent submissions cannot all pass the count
  (the first waits for the next to commit); over the limit: `QuotaExceeded` (429),
  nothing stored. A sweep's trial over the limit waits for a later pass, a schedule's
  fire time over it is recorded `skipped` with the reason.
* `max_priority`: a job asking for more is refused, naming `priority` (`BeyondQuota`,
  403); so is a gang that alone needs more replicas or GPUs than the running limits
  below allow (it could never start).
* `max_running_replicas`, `max_gpus`: the placer leaves a job queued while placing it
  would take its project past them, with the reason (services/cluster/fair_share.py);
  nothing is refused, the job starts when the project's running jobs end.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.exceptions import BeyondQuota, ProjectNotFound, QuotaExceeded
from services.jobs.quota_schemas import LIMITS, QuotaLimits, QuotaRead, QuotaUpdate, QuotaUsage
from services.jobs.schemas import JobCreate
from services.models import Job, Project, ProjectQuota, Replica, Schedule
from services.settings import Settings
from services.statuses import TERMINAL_REPLICA_STATUSES, JobStatus

ADMIN_HINT = "an admin can raise it (cohort quota set)"


def default_limits(settings: Settings) -> QuotaLimits:
    """The cluster's defaults (COHORT_QUOTA_*)."""
    return QuotaLimits(
        max_queued_jobs=settings.QUOTA_MAX_QUEUED_JOBS,
        max_running_replicas=settings.QUOTA_MAX_RUNNING_REPLICAS,
        max_gpus=settings.QUOTA_MAX_GPUS,
        max_schedules=settings.QUOTA_MAX_SCHEDULES,
        max_priority=settings.QUOTA_MAX_PRIORITY,
    )


def _overrides(row: ProjectQuota | None) -> QuotaLimits:
    return (
        QuotaLimits()
        if row is None
        else QuotaLimits(**{name: getattr(row, name) for name in LIMITS})
    )


def _in_force(overrides: QuotaLimits, defaults: QuotaLimits) -> QuotaLimits:
    return QuotaLimits(
        **{
            name: getattr(defaults, name)
            if getattr(overrides, name) is None
            else getattr(overrides, name)
            for name in LIMITS
        }
    )


def read_limits(*, session: Session, project_id: int, settings: Settings) -> QuotaLimits:
    """The limits in force for one project: its own over the defaults."""
    return read_many_limits(session=session, project_ids=[project_id], settings=settings)[
        project_id
    ]


def read_many_limits(
    *, session: Session, project_ids: Iterable[int], settings: Settings
) -> dict[int, QuotaLimits]:
    """The limits in force for each project, in one query."""
    wanted = set(project_ids)
    defaults = default_limits(settings)
    rows = {
        row.project_id: row
        for row in session.execute(
            sa.select(ProjectQuota).where(ProjectQuota.project_id.in_(wanted))
        ).scalars()
    }
    return {pid: _in_force(_overrides(rows.get(pid)), defaults) for pid in wanted}


def _lock_project(session: Session, project_id: int) -> None:
    # FOR NO KEY UPDATE: concurrent admissions to one project queue up here, and each
    # counts only after the one before it committed (READ COMMITTED reads afresh per
    # statement). It does not conflict with the KEY SHARE lock every insert of a row
    # referencing the project takes, so a transaction that has just inserted a job
    # never blocks another's admission, nor waits for it. SQLite ignores it: there a
    # transaction that writes after another committed is refused by SQLite itself.
    session.execute(
        sa.select(Project.id).where(Project.id == project_id).with_for_update(key_share=True)
    )


def check_spec(*, job_in: JobCreate, limits: QuotaLimits, field_prefix: str = "") -> None:
    """What a job asks for against what its project may ever have.

    Raises:
        BeyondQuota: a priority above the ceiling, a gang past a running limit.
    """
    if limits.max_priority is not None and job_in.priority > limits.max_priority:
        raise BeyondQuota(
            f"{field_prefix}priority",
            f"{job_in.priority} is above this project's ceiling of {limits.max_priority} "
            f"(max_priority); ask for {limits.max_priority} or less, or {ADMIN_HINT}",
            quota="max_priority",
            used=job_in.priority,
            allowed=limits.max_priority,
        )
    if limits.max_running_replicas is not None and job_in.replicas > limits.max_running_replicas:
        raise BeyondQuota(
            f"{field_prefix}replicas",
            f"{job_in.replicas} replicas at once, more than this project may run "
            f"({limits.max_running_replicas}, max_running_replicas); ask for fewer, or "
            f"{ADMIN_HINT}",
            quota="max_running_replicas",
            used=job_in.replicas,
            allowed=limits.max_running_replicas,
        )
    gpus = job_in.replicas * job_in.gpus_per_replica
    if limits.max_gpus is not None and gpus > limits.max_gpus:
        raise BeyondQuota(
            f"{field_prefix}gpus_per_replica",
            f"{gpus} GPUs at once ({job_in.gpus_per_replica} per replica × "
            f"{job_in.replicas}), more than this project may hold ({limits.max_gpus}, "
            f"max_gpus); ask for fewer, or {ADMIN_HINT}",
            quota="max_gpus",
            used=gpus,
            allowed=limits.max_gpus,
        )


def check_template(
    *, session: Session, project_id: int, job_in: JobCreate, settings: Settings, field_prefix: str
) -> None:
    """`check_spec` for a job a schedule or sweep will create later (no count: none
    is queued yet)."""
    check_spec(
        job_in=job_in,
        field_prefix=field_prefix,
        limits=read_limits(session=session, project_id=project_id, settings=settings),
    )


def queued_by_priority(*, session: Session, project_id: int, limits: QuotaLimits) -> dict[int, int]:
    """The project's queued jobs, counted by priority, in one query: their sum is what
    `max_queued_jobs` counts, and a new job's place in the project's queue follows from
    them. With a `max_queued_jobs` limit, the project's row is locked first: the caller
    admits and inserts in the same transaction, and the next admission counts only
    after it commits."""
    if limits.max_queued_jobs is not None:
        _lock_project(session, project_id)
    rows = session.execute(
        sa.select(Job.priority, sa.func.count())
        .where(Job.project_id == project_id, Job.status == JobStatus.QUEUED)
        .group_by(Job.priority)
    ).tuples()
    return {priority: int(count) for priority, count in rows}


def check_room(*, limits: QuotaLimits, used: int) -> None:
    """Whether one more job may be queued, `used` being queued already.

    Raises:
        QuotaExceeded: the project has `max_queued_jobs` jobs queued already.
    """
    allowed = limits.max_queued_jobs
    if allowed is not None and used >= allowed:
        raise QuotaExceeded(
            "max_queued_jobs",
            f"project quota: {used} of {allowed} queued jobs; submit again once some have "
            f"started or been cancelled, or {ADMIN_HINT}",
            quota="max_queued_jobs",
            used=used,
            allowed=allowed,
        )


def admit_schedule(*, session: Session, project_id: int, settings: Settings) -> None:
    """The quota check before a new schedule is stored (the project's row stays locked).

    Raises:
        QuotaExceeded: the project has `max_schedules` schedules already.
    """
    allowed = read_limits(session=session, project_id=project_id, settings=settings).max_schedules
    if allowed is None:
        return
    _lock_project(session, project_id)
    used = session.execute(
        sa.select(sa.func.count()).select_from(Schedule).where(Schedule.project_id == project_id)
    ).scalar_one()
    if used >= allowed:
        raise QuotaExceeded(
            "max_schedules",
            f"project quota: {used} of {allowed} schedules; delete one "
            f"(cohort schedule delete) or {ADMIN_HINT}",
            quota="max_schedules",
            used=used,
            allowed=allowed,
        )


@dataclass(frozen=True)
class Running:
    """What a project's live replicas hold."""

    replicas: int = 0
    cpu_slots: int = 0  # replicas of jobs without GPUs: each holds a CPU slot
    gpus: int = 0


def read_running(
    *, session: Session, project_ids: Iterable[int] | None = None
) -> dict[int, Running]:
    """What each project's live replicas hold, for the projects holding any.

    A replica counts from its placement until it has ended: it holds its slot or its
    GPUs all that time, whatever its job's status says.
    """
    cpu = sa.case((Job.gpus_per_replica == 0, 1), else_=0)
    query = (
        sa.select(
            Job.project_id, sa.func.count(), sa.func.sum(cpu), sa.func.sum(Job.gpus_per_replica)
        )
        .select_from(Replica)
        .join(Job, Job.id == Replica.job_id)
        .where(Replica.status.not_in(TERMINAL_REPLICA_STATUSES))
        .group_by(Job.project_id)
    )
    if project_ids is not None:
        query = query.where(Job.project_id.in_(set(project_ids)))
    return {
        pid: Running(int(replicas), int(slots or 0), int(gpus or 0))
        for pid, replicas, slots, gpus in session.execute(query)
    }


def _project(session: Session, name: str) -> Project:
    project = session.execute(sa.select(Project).where(Project.name == name)).scalar_one_or_none()
    if project is None:
        raise ProjectNotFound(name)
    return project


def read_quota(*, session: Session, project_name: str, settings: Settings) -> QuotaRead:
    """A project's limits (in force, its own, the defaults) and what it holds now."""
    project = _project(session, project_name)
    row = session.get(ProjectQuota, project.id)
    defaults = default_limits(settings)
    running = read_running(session=session, project_ids=[project.id]).get(project.id, Running())
    queued = session.execute(
        sa.select(sa.func.count())
        .select_from(Job)
        .where(Job.project_id == project.id, Job.status == JobStatus.QUEUED)
    ).scalar_one()
    schedules = session.execute(
        sa.select(sa.func.count()).select_from(Schedule).where(Schedule.project_id == project.id)
    ).scalar_one()
    return QuotaRead(
        project=project.name,
        limits=_in_force(_overrides(row), defaults),
        overrides=_overrides(row),
        defaults=defaults,
        used=QuotaUsage(
            queued_jobs=queued,
            running_replicas=running.replicas,
            gpus=running.gpus,
            schedules=schedules,
        ),
    )


def set_quota(
    *, session: Session, project_name: str, quota_in: QuotaUpdate, settings: Settings
) -> QuotaRead:
    """Replace a project's own limits (what is already queued or running stays; the new
    limits apply to what comes next)."""
    project = _project(session, project_name)
    row = session.get(ProjectQuota, project.id)
    if row is None:
        row = ProjectQuota(project_id=project.id)
        session.add(row)
    for name in LIMITS:
        setattr(row, name, getattr(quota_in, name))
    session.flush()
    return read_quota(session=session, project_name=project_name, settings=settings)
