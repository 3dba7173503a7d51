"""Jobs: create (idempotently), read, list with cursor pagination, cancel."""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.db import MAX_SQL_INT, newest_first_page
from services.exceptions import CohortError, InvalidJobSpec, InvalidTransition, JobNotFound
from services.jobs import admission, quotas
from services.jobs.admission import Admitted, Submission
from services.jobs.bundles import check_bundle, job_requirements
from services.jobs.hyperparameters import check_hyperparameters
from services.jobs.inputs import check_inputs_exist
from services.jobs.quota_schemas import QuotaLimits
from services.jobs.schemas import JobCreate
from services.jobs.spec import added_fields_at_default
from services.jobs.strategies import check_strategy_options
from services.jobs.trainers import check_trainer
from services.jobs.transitions import transition_job
from services.models import (
    Job,
    JobEvent,
    LogLine,
    MetricPoint,
    MetricRollup,
    Project,
    Replica,
)
from services.settings import Settings
from services.statuses import TERMINAL_STATUSES, JobStatus
from services.storage.store import ArtifactStore


def _spec_hash(job_in: JobCreate) -> str:
    """What a replayed Idempotency-Key is compared by: the sha256 of the spec's JSON,
    without the fields added since the first jobs that are still at their defaults."""
    unset = added_fields_at_default(job_in)
    return hashlib.sha256(job_in.model_dump_json(exclude=unset).encode()).hexdigest()


def check_job_spec(*, job_in: JobCreate, settings: Settings) -> None:
    """Checks that depend on settings rather than on the schema alone."""
    if job_in.trainer is not None:
        # A `module:function` in a bundle is the job's own code, resolved inside the
        # bundle; the allow-list is for entrypoints installed on the nodes.
        check_trainer(
            job_in.trainer, settings.ALLOWED_ENTRYPOINTS, in_bundle=job_in.bundle is not None
        )
    check_hyperparameters(
        hyperparameters=job_in.hyperparameters.model_dump(mode="json"),
        encoded=len(job_in.hyperparameters.model_dump_json().encode()),
        trainer=job_in.trainer,
        settings=settings,
    )
    if job_in.replicas > settings.MAX_REPLICAS:
        raise InvalidJobSpec(
            "replicas", f"at most {settings.MAX_REPLICAS} replicas per job; ask for fewer"
        )
    check_strategy_options(job_in)


def check_submission(
    *,
    session: Session | None,
    project_id: int,
    job_in: JobCreate,
    settings: Settings,
    store: ArtifactStore | None = None,
    bundle_pending: bool = False,
) -> list[str]:
    """What a submission is checked for before admission: the spec against the settings,
    its bundle (unless `bundle_pending`: not uploaded yet) and its inputs (nothing is
    locked; nothing is written). Returns its requirement lines (`Submission.requirements`).
    `session` may be None for a spec that names no bundle: SQL is read for a bundle only.

    Raises:
        InvalidJobSpec: a setting refuses the spec.
        BundleNotFound: the spec names a bundle the project has not uploaded.
        DataNotFound: an input names data the project has not uploaded."""
    check_job_spec(job_in=job_in, settings=settings)
    if not bundle_pending and job_in.bundle is not None:
        if session is None:
            raise TypeError("check_submission: a spec naming a bundle needs a session")
        check_bundle(session=session, project_id=project_id, digest=job_in.bundle)
    check_inputs_exist(project_id=project_id, inputs=job_in.inputs, settings=settings, store=store)
    return job_requirements(
        job_in=job_in, settings=settings, store=store, bundle_pending=bundle_pending
    )


def create_job(
    *,
    session: Session,
    project_id: int,
    job_in: JobCreate,
    settings: Settings,
    idempotency_key: str | None = None,
    store: ArtifactStore | None = None,
    trial_of: tuple[int, int] | None = None,
) -> tuple[Job, bool]:
    """Store a new queued job, or return the one already stored under `idempotency_key`.

    Returns the job and whether it was created now. The caller commits.
    `trial_of`: (sweep id, trial index) of a sweep's trial (services/sweeps).

    Raises:
        InvalidJobSpec, BundleNotFound, DataNotFound: see `check_submission`.
        IdempotencyConflict: the key was used before for a different spec.
        BeyondQuota: the project's quota never permits this job (priority, gang size).
        QuotaExceeded: the project has as many jobs queued as its quota allows.
    """
    lines = check_submission(
        session=session, project_id=project_id, job_in=job_in, settings=settings, store=store
    )
    outcome = admit_submissions(
        session=session,
        settings=settings,
        submissions=[Submission(project_id, job_in, idempotency_key, trial_of, tuple(lines))],
    )[0]
    if isinstance(outcome, Exception):
        raise outcome
    return outcome.job, outcome.created


def admit_submissions(
    *, session: Session, settings: Settings, submissions: list[Submission]
) -> list[Admitted | Exception]:
    """Admit and insert many checked submissions in the session's transaction; the caller
    commits. Each gets its own outcome, in order: its job, or the error that refused it
    (an IdempotencyConflict, a QuotaError, the IntegrityError of its own insert), and
    one submission's error leaves the others' jobs stored.

    Per project, in submission order: one lock and one count of the queued jobs serve
    the whole group, and the quota is counted as if each had been admitted alone, one
    after the other (a group never admits more than `max_queued_jobs` allows).
    """
    outcomes: list[Admitted | Exception | None] = [None] * len(submissions)
    by_project: dict[int, list[int]] = {}
    for index, submission in enumerate(submissions):
        by_project.setdefault(submission.project_id, []).append(index)
    # Projects in the order of their ids: two groups locking the rows of the same
    # projects lock them in the same order, and never wait for each other in a cycle.
    for project_id, indexes in sorted(by_project.items()):
        limits = quotas.read_limits(session=session, project_id=project_id, settings=settings)
        project = session.get(Project, project_id)  # the jobs' views name it
        queued = quotas.queued_by_priority(session=session, project_id=project_id, limits=limits)
        pending = [(index, submissions[index]) for index in indexes]
        while pending:  # a key repeated within the group waits for the next round
            pending = _admission_round(session, project, limits, queued, pending, outcomes)
    return [outcome for outcome in outcomes if outcome is not None]


_Pending = list[tuple[int, Submission]]


def _admission_round(
    session: Session,
    project: Project | None,
    limits: QuotaLimits,
    queued: dict[int, int],
    pending: _Pending,
    outcomes: list[Admitted | Exception | None],
    one_by_one: bool = False,
) -> _Pending:
    """Admit what it can of `pending` (one project's) and insert it, all in one
    savepoint unless `one_by_one`; returns the submissions that repeat a key admitted in
    this round, whose replay can only be read once that job is inserted."""
    accepted: list[tuple[int, Submission, Job, int]] = []
    later: _Pending = []
    keys: set[str] = set()
    for index, submission in pending:
        job_in, key = submission.job_in, submission.idempotency_key
        if key is not None and key in keys:
            later.append((index, submission))
            continue
        spec_hash = _spec_hash(job_in)
        decided = _replay_or_refusal(session, submission, spec_hash, limits, queued)
        if decided is not None:
            outcomes[index] = decided
            continue
        job = admission.new_job(submission, spec_hash, project)
        place = 1 + sum(n for priority, n in queued.items() if priority >= job_in.priority)
        if one_by_one:
            outcome = admission.insert_one(session, submission, job, spec_hash, place)
            outcomes[index] = outcome
            if isinstance(outcome, Admitted) and outcome.created:
                queued[job_in.priority] = queued.get(job_in.priority, 0) + 1
            continue
        accepted.append((index, submission, job, place))
        queued[job_in.priority] = queued.get(job_in.priority, 0) + 1
        if key is not None:
            keys.add(key)
    if accepted and not admission.insert_round(session, [job for _, _, job, _ in accepted]):
        # The round was undone: retried one insert at a time.
        for _, submission, _, _ in accepted:
            queued[submission.job_in.priority] -= 1
        retry = [(i, s) for i, s, _, _ in accepted]
        _admission_round(session, project, limits, queued, retry, outcomes, one_by_one=True)
        return later
    for index, _, job, place in accepted:
        outcomes[index] = Admitted(job, True, place)
    return later


def _replay_or_refusal(
    session: Session,
    submission: Submission,
    spec_hash: str,
    limits: QuotaLimits,
    queued: dict[int, int],
) -> Admitted | CohortError | None:
    """A submission's outcome known before any insert: the job its Idempotency-Key
    already names, or the error refusing it; None when it is to be inserted."""
    key = submission.idempotency_key
    try:
        if key is not None:
            existing = admission.by_idempotency_key(session, submission.project_id, key)
            if existing is not None:
                return Admitted(admission.replay(existing, spec_hash), False)
        quotas.check_spec(job_in=submission.job_in, limits=limits)
        quotas.check_room(limits=limits, used=sum(queued.values()))
    except CohortError as exc:
        return exc
    return None


def read_job(*, session: Session, project_id: int, job_id: int) -> Job:
    """A job of this project (another project's job is 'not found')."""
    job = session.execute(
        sa.select(Job).where(Job.id == job_id, Job.project_id == project_id)
    ).scalar_one_or_none()
    if job is None:
        raise JobNotFound(job_id)
    return job


def read_replicas(*, session: Session, job: Job, attempt: int | None = None) -> list[Replica]:
    """The replicas of one attempt (the current one by default), by index."""
    return list(
        session.execute(
            sa.select(Replica)
            .where(Replica.job_id == job.id, Replica.attempt == (attempt or job.attempt))
            .order_by(Replica.index)
        ).scalars()
    )


def read_current_replicas(*, session: Session, jobs: list[Job]) -> dict[int, list[Replica]]:
    """The replicas of each job's current attempt, by index: one query for a page of jobs."""
    if not jobs:
        return {}
    found: dict[int, list[Replica]] = {job.id: [] for job in jobs}
    rows = session.execute(
        sa.select(Replica)
        .where(sa.tuple_(Replica.job_id, Replica.attempt).in_([(j.id, j.attempt) for j in jobs]))
        .order_by(Replica.job_id, Replica.index)
    ).scalars()
    for replica in rows:
        found[replica.job_id].append(replica)
    return found


def read_events(*, session: Session, job: Job) -> list[JobEvent]:
    """The job's status history, oldest first."""
    return list(
        session.execute(
            sa.select(JobEvent).where(JobEvent.job_id == job.id).order_by(JobEvent.id)
        ).scalars()
    )


def encode_cursor(job_id: int) -> str:
    """The cursor of the page after the one that ended at `job_id` (jobs and sweeps)."""
    return str(job_id)


def decode_cursor(cursor: str) -> int | None:
    """The id a page continues below, or None when the cursor lies past every id.

    Raises:
        ValueError: not a cursor (a decimal number) this API could return.
    """
    if not (cursor.isascii() and cursor.isdigit() and len(cursor) <= 19):
        raise ValueError("cursor is not one this API returned")
    value = int(cursor)
    # Past the largest id an SQL INTEGER holds, every id is below it: no bound, rather
    # than a number the database refuses.
    return value if value <= MAX_SQL_INT else None


def list_jobs(
    *,
    session: Session,
    project_id: int,
    status: JobStatus | None = None,
    name: str | None = None,
    before: int | None = None,
    limit: int = 50,
    schedule_id: int | None = None,
    sweep_id: int | None = None,
) -> tuple[list[Job], int | None]:
    """Newest first; returns the page and the id to continue below (or None)."""
    query = sa.select(Job).where(Job.project_id == project_id)
    if status is not None:
        query = query.where(Job.status == status)
    if name:
        query = query.where(Job.name.contains(name, autoescape=True))
    if schedule_id is not None:
        query = query.where(Job.schedule_id == schedule_id)
    if sweep_id is not None:
        query = query.where(Job.sweep_id == sweep_id)
    return newest_first_page(session, query, Job.id, before, limit)


def request_cancel(*, session: Session, job: Job, reason: str = "cancelled by user") -> Job:
    """Cancel a job; its replicas are stopped by the scheduler's next pass.

    Raises:
        InvalidTransition: the job has already finished.
    """
    if job.status in TERMINAL_STATUSES:
        raise InvalidTransition(job.id, job.status, JobStatus.CANCELLED)
    return transition_job(session=session, job_id=job.id, target=JobStatus.CANCELLED, reason=reason)


def delete_jobs(*, session: Session, job_ids: list[int]) -> None:
    """Delete jobs with everything they own. The database cascades to replicas and
    events; metric points, their rollups and log lines carry no foreign key (a per-row
    check would cost the ingest dearly), so they are deleted here, before the jobs."""
    if not job_ids:
        return
    # The jobs' rows first, FOR UPDATE: an ingest still storing their rows (it holds
    # SHARE) commits before this goes on, so the deletes below see its rows; a later
    # ingest waits, then finds no job and stores nothing.
    session.execute(sa.select(Job.id).where(Job.id.in_(job_ids)).with_for_update())
    for series in (MetricPoint, MetricRollup, LogLine):
        session.execute(
            sa.delete(series)
            .where(series.job_id.in_(job_ids))
            .execution_options(synchronize_session=False)
        )
    session.execute(
        sa.delete(Job).where(Job.id.in_(job_ids)).execution_options(synchronize_session=False)
    )
