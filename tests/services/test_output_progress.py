"""Output as a sign of life, against PostgreSQL with the clock passed in: a replica whose
output keeps growing is not hung once every replica of its gang has started; before that
its output is no sign (TensorFlow keeps logging while a gang waits for a peer that never
joins); a silent replica beside a talkative peer is hung, its reason naming what counts."""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import Session

from services.cluster import gangs
from services.jobs import store as jobs
from services.scheduling import scheduler_pass
from services.settings import get_settings
from services.statuses import JobStatus
from tests.factories import create_job, create_token
from tests.services.test_failures import T0, beat, run
from tests.services.test_progress_timeouts import gang_of

Key = tuple[int, int, int]


def passes(
    session: Session, running: frozenset[Key], output: dict[Key, dt.datetime], at: dt.datetime
) -> None:
    scheduler_pass.run_pass(
        session=session,
        settings=get_settings(),
        heartbeats=[beat(at, running)],
        output={key: when.timestamp() for key, when in output.items()},
        now=at,
    )


def started(session: Session, *indexes: int):  # type: ignore[no-untyped-def]
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2, command=["python", "train.py"])
    run(session, T0)
    for index in indexes:
        gangs.record_replica_started(
            session=session, job_id=job.id, attempt=job.attempt, index=index, pid=1, at=T0
        )
    gangs.settle_job(session=session, job=job, now=T0)
    return job


def test_a_replica_that_keeps_printing_is_not_hung(session: Session) -> None:
    settings = get_settings()
    job = started(session, 0, 1)
    assert job.status is JobStatus.RUNNING
    # Printing every few seconds, far past the start-up and the progress limits.
    end = settings.STARTUP_TIMEOUT + 3 * settings.PROGRESS_TIMEOUT
    for second in range(10, int(end), 10):
        at = T0 + dt.timedelta(seconds=second)
        passes(session, gang_of(job), dict.fromkeys(gang_of(job), at - dt.timedelta(seconds=3)), at)
        assert job.status is JobStatus.RUNNING, (second, job.reason)
    # Then silent: hung at the progress limit, the reason naming what counts.
    last = T0 + dt.timedelta(seconds=end)
    quiet = last + dt.timedelta(seconds=settings.PROGRESS_TIMEOUT + 5)
    passes(session, gang_of(job), dict.fromkeys(gang_of(job), last), quiet)
    assert job.status is JobStatus.FAILED
    assert f"hung: no progress for {settings.PROGRESS_TIMEOUT:.0f}s: no output" in job.reason
    assert "cohort.report()" in job.reason and "$COHORT_CHECKPOINT_DIR" in job.reason


def test_output_before_the_gang_forms_is_no_sign(session: Session) -> None:
    settings = get_settings()
    job = started(session, 0)  # replica 1 never starts
    key = (job.id, job.attempt, 0)
    late = T0 + dt.timedelta(seconds=settings.STARTUP_TIMEOUT + 1)
    passes(session, frozenset({key}), {key: late - dt.timedelta(seconds=1)}, late)
    assert job.status is JobStatus.FAILED
    assert "its gang never formed" in job.reason
    assert "no training step within" in job.reason


def test_a_silent_replica_beside_a_printing_peer_is_hung(session: Session) -> None:
    settings = get_settings()
    job = started(session, 0, 1)
    talker = (job.id, job.attempt, 0)
    late = T0 + dt.timedelta(seconds=settings.STARTUP_TIMEOUT + 1)
    passes(session, gang_of(job), {talker: late - dt.timedelta(seconds=1)}, late)
    assert job.status is JobStatus.FAILED
    replicas = {r.index: r for r in jobs.read_replicas(session=session, job=job)}
    assert replicas[0].failure is None or "hung" not in (replicas[0].failure or "")
    assert "replica 1" in job.reason and "no training step within" in job.reason
    assert "no output" in job.reason


def test_output_never_shortens_the_start_up_limit(session: Session) -> None:
    """A replica that printed as it started, then sets up in silence (restores a
    checkpoint, connects to its parameter servers) for longer than the progress limit,
    is not hung before STARTUP_TIMEOUT: output only extends the start-up, it never turns
    the start-up limit into the shorter progress limit. (A restarted parameter_server
    chief on a slow machine was judged hung 20 s after its first lines, well inside its
    90 s start-up limit: two CI runs of 2026-11-28.)"""
    settings = get_settings()
    assert settings.PROGRESS_TIMEOUT + 5 < settings.STARTUP_TIMEOUT
    job = started(session, 0, 1)
    printed = {key: T0 + dt.timedelta(seconds=2) for key in gang_of(job)}
    silent = T0 + dt.timedelta(seconds=settings.PROGRESS_TIMEOUT + 5)
    passes(session, gang_of(job), printed, silent)
    assert job.status is JobStatus.RUNNING, job.reason
    # Past the start-up limit with neither a step nor recent output: hung.
    late = T0 + dt.timedelta(seconds=settings.STARTUP_TIMEOUT + 1)
    passes(session, gang_of(job), printed, late)
    assert job.status is JobStatus.FAILED
    assert f"no training step within {settings.STARTUP_TIMEOUT:.0f}s" in job.reason
