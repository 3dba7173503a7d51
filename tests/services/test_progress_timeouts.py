"""A job's own progress_timeout_seconds against PostgreSQL: a shorter or longer limit than
the cluster's, and 0 (no progress watchdog: the start-up limit then covers only the
gang's processes being started; the deadline still applies). The clock is passed in."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy.orm import Session

from services.cluster import gangs, watchdog
from services.jobs import store as jobs
from services.models import Job
from services.scheduling import scheduler_pass
from services.settings import get_settings
from services.statuses import JobStatus, ReplicaStatus
from tests.factories import create_job, create_token
from tests.services.test_failures import T0, beat, run, start_gang

Key = tuple[int, int, int]


def gang_of(job: Job) -> frozenset[Key]:
    return frozenset((job.id, job.attempt, index) for index in range(job.replicas))


def job_with(session: Session, **spec: object) -> Job:
    _, token = create_token(session)
    return create_job(session, token.project_id, replicas=2, **spec)


def beating(session: Session, job: Job, at: dt.datetime, progress_at: dt.datetime) -> None:
    """A scheduling pass at `at` where every replica of the gang last showed progress at
    `progress_at` (and the node's heartbeat lists them all as running)."""
    progress = {key: progress_at.timestamp() for key in gang_of(job)}
    run(session, at, beat(at, gang_of(job)), progress=progress)


@pytest.mark.parametrize("factor", [0.5, 3.0])
def test_a_jobs_own_limit_replaces_the_clusters(session: Session, factor: float) -> None:
    default = get_settings().PROGRESS_TIMEOUT
    own = int(default * factor)
    job = job_with(session, progress_timeout_seconds=own)
    start_gang(session, job, T0)
    t1 = T0 + dt.timedelta(seconds=1)
    beating(session, job, t1, t1)
    # Past the shorter of the two limits only: hung only if that is the job's own. (The
    # progress hash keeps each replica's last beat: every pass reads t1 again.)
    shorter = t1 + dt.timedelta(seconds=min(own, default) + 1)
    beating(session, job, shorter, t1)
    if own < default:
        assert job.status is JobStatus.FAILED
        assert f"hung: no progress for {own:.0f}s" in job.reason
        return
    assert job.status is JobStatus.RUNNING
    longer = t1 + dt.timedelta(seconds=own + 1)
    beating(session, job, longer, t1)
    assert job.status is JobStatus.FAILED
    assert f"hung: no progress for {own:.0f}s" in job.reason


def test_zero_turns_the_progress_watchdog_off(session: Session) -> None:
    settings = get_settings()
    quiet = job_with(session, progress_timeout_seconds=0, active_deadline_seconds=100_000)
    quiet.created_at = T0
    start_gang(session, quiet, T0)
    # It showed progress once, then never again (a custom loop that reports nothing).
    beating(session, quiet, T0 + dt.timedelta(seconds=1), T0 + dt.timedelta(seconds=1))
    later = T0 + dt.timedelta(seconds=settings.PROGRESS_TIMEOUT * 10)
    run(session, later, beat(later, gang_of(quiet)))
    assert quiet.status is JobStatus.RUNNING

    # The deadline still applies.
    past = T0 + dt.timedelta(seconds=100_001)
    run(session, past, beat(past, gang_of(quiet)))
    assert quiet.status is JobStatus.FAILED
    assert "active_deadline_seconds" in quiet.reason


def test_zero_needs_no_first_step_once_the_whole_gang_started(session: Session) -> None:
    settings = get_settings()
    silent = job_with(session, progress_timeout_seconds=0)
    start_gang(session, silent, T0)
    later = T0 + dt.timedelta(seconds=settings.STARTUP_TIMEOUT * 3)
    run(session, later, beat(later, gang_of(silent)))  # no progress ever seen
    assert silent.status is JobStatus.RUNNING
    assert all(
        r.status is ReplicaStatus.RUNNING for r in jobs.read_replicas(session=session, job=silent)
    )


def test_zero_still_fails_a_gang_whose_processes_did_not_all_start(session: Session) -> None:
    settings = get_settings()
    job = job_with(session, progress_timeout_seconds=0)
    run(session, T0)
    assert job.status is JobStatus.SCHEDULED
    # Replica 0 starts; replica 1's start never happens.
    gangs.record_replica_started(session=session, job_id=job.id, attempt=1, index=0, pid=1, at=T0)
    gangs.settle_job(session=session, job=job, now=T0)
    started = frozenset({(job.id, 1, 0)})
    # Its agent still works on replica 1's start (fetching its code, say): not a start
    # left unanswered (START_ANSWER_TIMEOUT), so the start-up limit decides.
    fetching = frozenset({(job.id, 1, 1)})
    early = T0 + dt.timedelta(seconds=settings.STARTUP_TIMEOUT - 1)
    run(session, early, beat(early, started, preparing=fetching))
    assert job.status is JobStatus.SCHEDULED
    late = T0 + dt.timedelta(seconds=settings.STARTUP_TIMEOUT + 1)
    run(session, late, beat(late, started, preparing=fetching))
    assert job.status is JobStatus.FAILED
    assert (
        "hung: the gang's processes were not all started within "
        f"{settings.STARTUP_TIMEOUT:.0f}s" in job.reason
    )


def test_a_gang_that_never_steps_is_still_hung_without_zero(session: Session) -> None:
    settings = get_settings()
    job = job_with(session, progress_timeout_seconds=int(settings.PROGRESS_TIMEOUT * 10))
    start_gang(session, job, T0)
    later = T0 + dt.timedelta(seconds=settings.STARTUP_TIMEOUT + 1)
    run(session, later, beat(later, gang_of(job)))
    assert job.status is JobStatus.FAILED
    assert "no training step within" in job.reason


def silent_pass(session: Session, now: dt.datetime) -> None:
    """A pass that reads no heartbeat and no progress beat at all (Redis lost them)."""
    scheduler_pass.run_pass(
        session=session, settings=get_settings(), heartbeats=[], progress=None, now=now
    )


@pytest.mark.parametrize("excused", [True, False])
def test_a_redis_wipe_excuses_the_silence_it_caused_once(session: Session, excused: bool) -> None:
    settings = get_settings()
    timeout = dt.timedelta(seconds=max(settings.PROGRESS_TIMEOUT, settings.NODE_TIMEOUT) + 1)
    job = job_with(session)
    start_gang(session, job, T0)
    t1 = T0 + dt.timedelta(seconds=1)
    beating(session, job, t1, t1)
    wiped_at = t1 + timeout  # nothing heard since t1: the beats were in the wiped Redis
    if excused:
        watchdog.excuse_silence(session=session, now=wiped_at)
    silent_pass(session, wiped_at)
    if not excused:  # the control: the same silence, not excused, ends the gang
        assert job.status is not JobStatus.RUNNING, job.reason
        return
    assert job.status is JobStatus.RUNNING, job.reason
    assert all(
        r.status is ReplicaStatus.RUNNING for r in jobs.read_replicas(session=session, job=job)
    )
    # Excused once: still silent a timeout after the wipe, the gang is lost after all.
    silent_pass(session, wiped_at + timeout)
    assert job.status is not JobStatus.RUNNING
