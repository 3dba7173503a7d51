"""Admission's parts below the quota: a submission and its outcome, the job row a checked
spec becomes, its inserts (a round in one savepoint, or one at a time) and the replay of
an Idempotency-Key already used. The rounds themselves: services/jobs/store.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.exceptions import IdempotencyConflict
from services.jobs.schemas import JobCreate
from services.jobs.spec import stored_columns
from services.models import Job, JobEvent, Project
from services.statuses import JobStatus


@dataclass(frozen=True)
class Submission:
    """A checked spec (`store.check_submission`) waiting for admission."""

    project_id: int
    job_in: JobCreate
    idempotency_key: str | None = None
    trial_of: tuple[int, int] | None = None  # (sweep id, trial index)
    # What check_submission resolved: its `pip`, or its bundle's requirements.txt.
    requirements: tuple[str, ...] = ()


@dataclass(frozen=True)
class Admitted:
    """A submission's job: created now, or the one its Idempotency-Key already named."""

    job: Job
    created: bool
    # A created job's place in its project's queue when it was admitted (None otherwise):
    # the place `queue.queue_positions` would give it then, without reading the queue again.
    queue_position: int | None = None


def new_job(submission: Submission, spec_hash: str, project: Project | None) -> Job:
    """The queued job a checked submission describes (not yet added to the session)."""
    job = Job(
        **stored_columns(submission.job_in),
        project_id=submission.project_id,
        idempotency_key=submission.idempotency_key,
        spec_hash=spec_hash,
        requirements="\n".join(submission.requirements or submission.job_in.pip),
        status=JobStatus.QUEUED,
        reason="waiting for the scheduler",
    )
    if submission.trial_of is not None:
        job.sweep_id, job.trial_index = submission.trial_of
    if project is not None:
        job.project = project  # the job's view names it
    return job


def insert_round(session: Session, jobs: list[Job]) -> bool:
    """Insert a round's jobs and their first events in one savepoint. False: an insert
    failed (a key that another process has just used) and the whole round was undone."""
    connection = session.connection()
    try:
        with session.begin_nested():
            # One INSERT per row, of one SQL text: a multi-row INSERT of jobs' 38
            # columns is text that psycopg parses anew for each group size (it caches
            # statements of at most 50 parameters), which cost more CPU than the round
            # trips it saves.
            connection.execution_options(insertmanyvalues_page_size=1)
            session.add_all(jobs)
            session.flush()
            # The events as one executemany of plain rows: nothing reads them back, and
            # the unit of work's bookkeeping of an object per event cost more than its SQL.
            session.execute(sa.insert(JobEvent), [_submitted_row(job) for job in jobs])
    except IntegrityError:
        return False
    finally:
        # For these rows only: the option stays on the connection for the rest of the
        # transaction, where a pass that created sweep trials then inserts the replicas
        # it placed (one statement each, had it stayed).
        connection.execution_options(
            insertmanyvalues_page_size=connection.dialect.insertmanyvalues_page_size
        )
    return True


def insert_one(
    session: Session, submission: Submission, job: Job, spec_hash: str, place: int
) -> Admitted | Exception:
    """Insert one job; losing a race on its key answers with the winner's job (or the
    conflict, for a different spec)."""
    try:
        # A savepoint, so that losing a race on the idempotency key leaves the
        # outer transaction usable for reading the winner.
        with session.begin_nested():
            session.add(job)
            session.flush()
            session.add(_submitted_event(job))
            session.flush()
    except IntegrityError as exc:
        key = submission.idempotency_key
        existing = None if key is None else by_idempotency_key(session, submission.project_id, key)
        if existing is None:
            return exc
        try:
            return Admitted(replay(existing, spec_hash), False)
        except IdempotencyConflict as conflict:
            return conflict
    return Admitted(job, True, place)


def _submitted_event(job: Job) -> JobEvent:
    return JobEvent(**_submitted_row(job))


def _submitted_row(job: Job) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "attempt": job.attempt or 1,
        "from_status": None,
        "to_status": JobStatus.QUEUED,
        "reason": "submitted",
    }


def by_idempotency_key(session: Session, project_id: int, key: str) -> Job | None:
    """The project's job stored under this Idempotency-Key, if any."""
    return session.execute(
        sa.select(Job).where(Job.project_id == project_id, Job.idempotency_key == key)
    ).scalar_one_or_none()


def replay(existing: Job, spec_hash: str) -> Job:
    """The job a repeated Idempotency-Key names, when the spec is the same.

    Raises:
        IdempotencyConflict: the key was used before for a different spec.
    """
    if existing.spec_hash != spec_hash:
        raise IdempotencyConflict(
            f"Idempotency-Key already used for job {existing.id} with a different spec; "
            "use a new key for a new job"
        )
    return existing
