"""Failure rules against PostgreSQL: restart policies and budgets, backoff, hung replicas,
deadlines, TTL cleanup, exits known only from a heartbeat. The clock is passed in."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy.orm import Session

from services.cluster import gang_outcome, gangs
from services.cluster.nodes import Heartbeat
from services.jobs import store as jobs
from services.models import Job, utcnow
from services.scheduling import scheduler_pass
from services.settings import get_settings
from services.statuses import JobStatus, ReplicaStatus
from services.wire.replica import CleanupJob, StartReplica, StopReplica
from tests.factories import create_job, create_token

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def beat(
    at: dt.datetime,
    running: frozenset[tuple[int, int, int]] = frozenset(),
    exited: dict[tuple[int, int, int], int] | None = None,
    preparing: frozenset[tuple[int, int, int]] = frozenset(),
) -> Heartbeat:
    return Heartbeat(
        "n1",
        "10.1.0.1",
        4,
        0,
        at,
        running=running,
        exited=exited or {},
        preparing=preparing,
        after=at,
    )


def run(
    session: Session,
    now: dt.datetime,
    *beats: Heartbeat,
    progress: dict[tuple[int, int, int], float] | None = None,
) -> scheduler_pass.PassResult:
    return scheduler_pass.run_pass(
        session=session,
        settings=get_settings(),
        heartbeats=list(beats) or [beat(now)],
        progress=progress,
        now=now,
    )


def start_gang(session: Session, job: Job, now: dt.datetime) -> None:
    run(session, now)
    assert job.status is JobStatus.SCHEDULED
    for replica in jobs.read_replicas(session=session, job=job):
        gangs.record_replica_started(
            session=session, job_id=job.id, attempt=job.attempt, index=replica.index, pid=1, at=now
        )
    gangs.settle_job(session=session, job=job, now=now)
    assert job.status is JobStatus.RUNNING


def fail_replica(
    session: Session, job: Job, index: int, code: int, now: dt.datetime, log_tail: str = ""
) -> None:
    gangs.record_replica_exited(
        session=session,
        job_id=job.id,
        attempt=job.attempt,
        index=index,
        exit_code=code,
        log_tail=log_tail,
        at=now,
    )
    gangs.settle_job(session=session, job=job, now=now)


def finish_teardown(session: Session, job: Job, now: dt.datetime) -> None:
    for replica in jobs.read_replicas(session=session, job=job):
        gangs.record_replica_exited(
            session=session,
            job_id=job.id,
            attempt=replica.attempt,
            index=replica.index,
            exit_code=143,
            log_tail="",
            at=now,
        )
    gangs.settle_job(session=session, job=job, now=now)


def restarted_job(session: Session) -> Job:
    """A 2-replica job whose first gang failed and was torn down: queued for attempt 2."""
    _, token = create_token(session)
    job = create_job(
        session, token.project_id, replicas=2, restart_policy="on_failure", max_restarts=1
    )
    start_gang(session, job, T0)
    fail_replica(session, job, 0, 137, T0)
    finish_teardown(session, job, T0)
    assert job.status is JobStatus.QUEUED and job.attempt == 2
    return job


@pytest.mark.parametrize(
    ("code", "restarts"),
    [
        (137, True),
        (143, True),
        (130, True),
        (138, True),
        (134, True),
        (1, False),
        (2, False),
        (126, False),
        (127, False),
        (139, False),
    ],
)
def test_exit_code_policy_restarts_only_retryable(
    session: Session, code: int, restarts: bool
) -> None:
    _, token = create_token(session)
    job = create_job(
        session, token.project_id, replicas=2, restart_policy="exit_code", max_restarts=3
    )
    start_gang(session, job, T0)
    fail_replica(session, job, 0, code, T0)
    expected = JobStatus.RESTARTING if restarts else JobStatus.FAILED
    assert job.status is expected, job.reason
    if not restarts:
        assert "not restarted: the exit code is not retryable" in job.reason


@pytest.mark.parametrize(
    ("code", "log_tail", "restarts"),
    [
        (137, "", True),
        (138, "", True),
        (1, "Traceback\nConnectionResetError: [Errno 104] reset by peer", True),
        (3, "", True),
        (1, '  File "train.py", line 2\n    def (:\nSyntaxError: invalid syntax\n', False),
        (1, "ModuleNotFoundError: No module named 'tensorflw'", False),
        (2, "", False),
        (126, "", False),
        (127, "", False),
    ],
)
def test_on_failure_restarts_every_failure_but_a_permanent_one(
    session: Session, code: int, log_tail: str, restarts: bool
) -> None:
    _, token = create_token(session)
    job = create_job(
        session, token.project_id, replicas=2, restart_policy="on_failure", max_restarts=3
    )
    start_gang(session, job, T0)
    fail_replica(session, job, 0, code, T0, log_tail)
    expected = JobStatus.RESTARTING if restarts else JobStatus.FAILED
    assert job.status is expected, job.reason
    if restarts:
        assert "(permanent)" not in job.reason and ", permanent)" not in job.reason
    else:
        assert "permanent)" in job.reason
        assert job.reason.endswith(
            "not restarted: the failure is permanent (another attempt would fail the same way)"
        )


@pytest.mark.parametrize("policy", ["on_failure", "exit_code"])
def test_budget_holds_for_every_policy(session: Session, policy: str) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2, restart_policy=policy, max_restarts=2)
    now = T0
    for attempt in (1, 2, 3):
        start_gang(session, job, now)
        assert job.attempt == attempt
        fail_replica(session, job, 1, 137, now)
        if attempt < 3:
            assert job.status is JobStatus.RESTARTING
            finish_teardown(session, job, now)
            assert job.status is JobStatus.QUEUED
            now = job.not_before or now
    assert job.status is JobStatus.FAILED
    assert "restart budget spent (2 restarts)" in job.reason


def test_backoff_doubles_and_holds_placement(session: Session) -> None:
    settings = get_settings()
    assert gang_outcome.restart_backoff(1) == settings.RESTART_BACKOFF
    assert gang_outcome.restart_backoff(2) == 2 * settings.RESTART_BACKOFF
    assert gang_outcome.restart_backoff(50) == settings.RESTART_BACKOFF_MAX
    job = restarted_job(session)
    early = run(session, T0 + dt.timedelta(seconds=settings.RESTART_BACKOFF / 2))
    assert not [m for m in early.messages if isinstance(m, StartReplica)]
    assert job.reason.startswith("restart backoff")
    late = run(session, T0 + dt.timedelta(seconds=settings.RESTART_BACKOFF))
    assert len([m for m in late.messages if isinstance(m, StartReplica)]) == 2


Keys = frozenset[tuple[int, int, int]]


def stepping_gang(
    session: Session, restart_policy: str
) -> tuple[Job, Keys, dt.datetime, dict[tuple[int, int, int], float]]:
    """A running 2-replica gang (one restart allowed), both replicas listed by their
    agent and making progress at the time returned; also the keys and their progress."""
    _, token = create_token(session)
    job = create_job(
        session, token.project_id, replicas=2, restart_policy=restart_policy, max_restarts=1
    )
    start_gang(session, job, T0)
    running = frozenset({(job.id, 1, 0), (job.id, 1, 1)})
    t1 = T0 + dt.timedelta(seconds=5)
    progress = {key: t1.timestamp() for key in running}
    run(session, t1, beat(t1, running), progress=progress)
    assert job.status is JobStatus.RUNNING
    return job, running, t1, progress


def hung_gang(session: Session) -> tuple[Job, dt.datetime]:
    """A 2-replica gang whose replica 1 froze (replica 0 kept making progress), declared
    hung at the time returned: the job is restarting, replica 1 failed with no exit."""
    settings = get_settings()
    job, running, t1, progress = stepping_gang(session, "exit_code")
    t2 = t1 + dt.timedelta(seconds=settings.PROGRESS_TIMEOUT + 1)
    progress[(job.id, 1, 0)] = t2.timestamp()
    run(session, t2, beat(t2, running), progress=progress)
    assert job.status is JobStatus.RESTARTING
    return job, t2


def test_no_progress_fails_the_replica_and_restarts(session: Session) -> None:
    settings = get_settings()
    job, t2 = hung_gang(session)
    assert f"replica 1 on n1 hung: no progress for {settings.PROGRESS_TIMEOUT:.0f}s" in job.reason
    frozen = jobs.read_replicas(session=session, job=job, attempt=1)[1]
    assert frozen.status is ReplicaStatus.FAILED and frozen.exit_code is None
    # Its process may live until its agent's SIGKILL after STOP_GRACE: the next attempt
    # is not placed before then, whatever the backoff.
    assert job.not_before == t2 + dt.timedelta(
        seconds=max(
            gang_outcome.restart_backoff(1),
            settings.STOP_GRACE + gang_outcome.STOP_DELIVERY_SECONDS,
        )
    )
    finish_teardown(session, job, t2)
    # An agent's event does not say whether the frozen process is gone: a pass decides,
    # on what its agent lists as running.
    assert job.status is JobStatus.RESTARTING
    frozen_key = frozenset({(job.id, 1, 1)})
    t3 = t2 + dt.timedelta(seconds=settings.STOP_GRACE)
    held = run(session, t3, beat(t3, frozen_key))
    assert job.status is JobStatus.RESTARTING  # listed: the gang is not placed again
    assert not [m for m in held.messages if isinstance(m, StartReplica | StopReplica)]
    # Still listed once a stop would be re-sent: its stop was lost. Sent again.
    t4 = t2 + dt.timedelta(seconds=settings.STOP_RESEND_AFTER)
    again = run(session, t4, beat(t4, frozen_key))
    assert job.status is JobStatus.RESTARTING
    assert [
        (m.job_id, m.attempt, m.index) for m in again.messages if isinstance(m, StopReplica)
    ] == [(job.id, 1, 1)]
    assert not [m for m in again.messages if isinstance(m, StartReplica)]
    # Gone from its agent's list: the gang is queued and placed in the same pass.
    t5 = t4 + dt.timedelta(seconds=1)
    placed = run(session, t5, beat(t5))
    assert job.status is JobStatus.SCHEDULED and job.attempt == 2
    assert len([m for m in placed.messages if isinstance(m, StartReplica)]) == 2


def test_a_replica_declared_hung_while_its_gang_is_torn_down_holds_it_back_while_listed(
    session: Session,
) -> None:
    """The 200-job chaos soak of 2026-11-28: a gang torn down for its other replica, this
    one frozen with its stop pending, then declared hung. In the pass that declared it,
    it counted as running in SQL, so its agent's list was not looked up, and the gang was
    placed again beside its still-live process."""
    settings = get_settings()
    job, _running, t1, progress = stepping_gang(session, "on_failure")
    fail_replica(session, job, 1, 137, t1)  # its own exit: the gang is torn down
    assert job.status is JobStatus.RESTARTING
    frozen = frozenset({(job.id, 1, 0)})  # no progress since t1, still listed
    t2 = t1 + dt.timedelta(seconds=settings.PROGRESS_TIMEOUT + 1)
    assert job.not_before is not None and t2 > job.not_before  # the backoff holds nothing
    declared = run(session, t2, beat(t2, frozen), progress=progress)
    replica = jobs.read_replicas(session=session, job=job, attempt=1)[0]
    assert replica.status is ReplicaStatus.FAILED and "hung" in (replica.failure or "")
    assert job.status is JobStatus.RESTARTING, job.reason  # listed: not placed again
    assert not [m for m in declared.messages if isinstance(m, StartReplica)]
    t3 = t2 + dt.timedelta(seconds=1)
    placed = run(session, t3, beat(t3))  # gone from its agent's list
    assert job.status is JobStatus.SCHEDULED and job.attempt == 2
    assert len([m for m in placed.messages if isinstance(m, StartReplica)]) == 2


def test_a_replica_its_agent_lists_for_ever_holds_its_gang_back_for_a_bounded_time(
    session: Session,
) -> None:
    settings = get_settings()
    job, t2 = hung_gang(session)
    finish_teardown(session, job, t2)
    listed = frozenset({(job.id, 1, 1)})
    limit = settings.STOP_GRACE + gangs.HOLD_STOPS * settings.STOP_RESEND_AFTER
    before = t2 + dt.timedelta(seconds=limit - 1)
    run(session, before, beat(before, listed))
    assert job.status is JobStatus.RESTARTING
    after = t2 + dt.timedelta(seconds=limit + 1)
    run(session, after, beat(after, listed))
    assert job.status is JobStatus.SCHEDULED and job.attempt == 2  # the job goes on


def test_a_lost_nodes_last_beat_holds_no_gang_back(session: Session) -> None:
    """Its last beat stays in Redis, listing what ran there: it says nothing of now."""
    settings = get_settings()
    _, token = create_token(session)
    job = create_job(
        session, token.project_id, replicas=2, restart_policy="on_failure", max_restarts=1
    )
    start_gang(session, job, T0)
    last = beat(T0 + dt.timedelta(seconds=1), frozenset({(job.id, 1, 0), (job.id, 1, 1)}))
    run(session, last.at, last)
    late = last.at + dt.timedelta(seconds=settings.NODE_TIMEOUT + 1)
    result = run(session, late, last)
    assert result.lost_nodes == ["n1"] and job.status is JobStatus.RESTARTING
    later = late + dt.timedelta(seconds=1)
    run(session, later, last)  # the next pass: the beat still lists both replicas
    assert job.status is JobStatus.QUEUED and job.attempt == 2, job.reason


def test_a_silent_nodes_replicas_are_lost_with_it_never_judged_hung(session: Session) -> None:
    """No progress from a node not heard from for longer than its agent's lease is the
    node's silence (its agent is gone: the replicas stop themselves): NODE_TIMEOUT settles
    it as lost. Judged hung first, the gang would be placed again on that silent node."""
    settings = get_settings()
    job, running, t1, progress = stepping_gang(session, "on_failure")
    # The agent beats until shortly before the progress limit, then falls silent.
    last = beat(t1 + dt.timedelta(seconds=settings.PROGRESS_TIMEOUT - 2), running)
    run(session, last.at, last, progress=progress)
    assert job.status is JobStatus.RUNNING
    # Past the progress limit, the node silent for longer than the lease, not yet lost:
    quiet = last.at + dt.timedelta(seconds=settings.AGENT_LEASE + 1)
    assert quiet - t1 > dt.timedelta(seconds=settings.PROGRESS_TIMEOUT)
    assert quiet - last.at < dt.timedelta(seconds=settings.NODE_TIMEOUT)
    run(session, quiet, last, progress=progress)
    assert job.status is JobStatus.RUNNING, job.reason  # not hung
    # At NODE_TIMEOUT the node is lost, and its replicas with it.
    late = last.at + dt.timedelta(seconds=settings.NODE_TIMEOUT + 1)
    result = run(session, late, last, progress=progress)
    assert result.lost_nodes == ["n1"] and job.status is JobStatus.RESTARTING
    assert "stopped answering" in (job.reason or "") and "hung" not in (job.reason or ""), (
        job.reason
    )


def test_a_frozen_replica_left_alone_by_its_agent_holds_back_no_restart(session: Session) -> None:
    """The same hang, its process gone by the next pass: the gang is placed again at
    its restart delay, as before."""
    job, t2 = hung_gang(session)
    finish_teardown(session, job, t2)
    early = t2 + dt.timedelta(seconds=1)
    held = run(session, early, beat(early))
    assert job.status is JobStatus.QUEUED  # nothing of it listed: queued
    assert not [m for m in held.messages if isinstance(m, StartReplica)]  # not before
    placed = run(session, job.not_before, beat(job.not_before))
    assert len([m for m in placed.messages if isinstance(m, StartReplica)]) == 2


def test_a_replica_that_exited_holds_the_restart_for_the_backoff_only(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(
        session, token.project_id, replicas=2, restart_policy="on_failure", max_restarts=1
    )
    start_gang(session, job, T0)
    fail_replica(session, job, 0, 137, T0)  # its own exit: nothing of it is left
    assert job.status is JobStatus.RESTARTING
    assert job.not_before == T0 + dt.timedelta(seconds=gang_outcome.restart_backoff(1))


def test_gang_that_never_steps_is_hung(session: Session) -> None:
    settings = get_settings()
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2)
    start_gang(session, job, T0)
    running = frozenset({(job.id, 1, 0), (job.id, 1, 1)})
    later = T0 + dt.timedelta(seconds=settings.STARTUP_TIMEOUT + 1)
    run(session, later, beat(later, running))
    assert job.status is JobStatus.FAILED
    assert "no training step within" in job.reason


def test_exit_known_only_from_heartbeat(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2)
    start_gang(session, job, T0)
    later = T0 + dt.timedelta(seconds=10)
    exited = {(job.id, 1, 0): 0, (job.id, 1, 1): 0}
    run(
        session,
        later,
        beat(later, exited=exited),
        progress={(job.id, 1, i): later.timestamp() for i in (0, 1)},
    )
    assert job.status is JobStatus.SUCCEEDED


def test_replica_missing_from_heartbeat_is_lost(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(
        session, token.project_id, replicas=2, restart_policy="on_failure", max_restarts=1
    )
    start_gang(session, job, T0)
    later = T0 + dt.timedelta(seconds=10)
    run(
        session,
        later,
        beat(later, running=frozenset({(job.id, 1, 0)})),
        progress={(job.id, 1, i): later.timestamp() for i in (0, 1)},
    )
    assert job.status is JobStatus.RESTARTING
    assert "its agent no longer runs it" in job.reason


def placed_job(session: Session) -> Job:
    """A 2-replica job placed on n1 at T0, neither replica started."""
    _, token = create_token(session)
    job = create_job(
        session, token.project_id, replicas=2, restart_policy="on_failure", max_restarts=1
    )
    run(session, T0)
    assert job.status is JobStatus.SCHEDULED
    return job


def test_a_start_no_agent_answers_is_lost_and_the_policy_restarts_the_gang(
    session: Session,
) -> None:
    """The agent's beats go on but never list the replica (its start was claimed by an
    agent that died, or cannot be acted on): the job does not wait `scheduled` for good."""
    limit = get_settings().START_ANSWER_TIMEOUT
    job = placed_job(session)
    before = T0 + dt.timedelta(seconds=limit - 1)
    run(session, before, beat(before))
    assert job.status is JobStatus.SCHEDULED  # re-sent starts may still be acted on
    later = T0 + dt.timedelta(seconds=limit + 1)
    result = run(session, later, beat(later))
    assert job.status is JobStatus.RESTARTING and job.attempt == 1
    assert f"did not start it within {limit:.0f}s of its placement" in job.reason
    statuses = {r.index: r.status for r in jobs.read_replicas(session=session, job=job)}
    assert statuses == {0: ReplicaStatus.LOST, 1: ReplicaStatus.LOST}
    # Lost without an exit of their own: each is told to stop, should it start after all.
    stops = [m for m in result.messages if isinstance(m, StopReplica)]
    assert sorted(m.index for m in stops) == [0, 1]


def test_no_start_is_judged_unanswered_while_its_agent_works_on_one(session: Session) -> None:
    """An agent restoring a large checkpoint or fetching code for one replica may hold the
    next start messages in its queue meanwhile: those are not left unanswered either."""
    limit = get_settings().START_ANSWER_TIMEOUT
    job = placed_job(session)
    later = T0 + dt.timedelta(seconds=limit + 1)
    for preparing in ({(job.id, 1, 0)}, {(job.id + 1000, 1, 0)}):  # its own, another job's
        run(session, later, beat(later, preparing=frozenset(preparing)))
        assert job.status is JobStatus.SCHEDULED
        assert all(
            r.status is ReplicaStatus.PENDING for r in jobs.read_replicas(session=session, job=job)
        )


def test_a_beat_written_before_the_limit_says_nothing_of_an_unanswered_start(
    session: Session,
) -> None:
    """Heard after the limit, but written before it (`after`): the agent may have
    answered since."""
    limit = get_settings().START_ANSWER_TIMEOUT
    job = placed_job(session)
    later = T0 + dt.timedelta(seconds=limit + 1)
    old = Heartbeat("n1", "10.1.0.1", 4, 0, later, after=T0 + dt.timedelta(seconds=limit - 1))
    run(session, later, old)
    assert job.status is JobStatus.SCHEDULED


def test_a_refused_start_whose_event_was_lost_is_settled_by_its_exit_in_the_beat(
    session: Session,
) -> None:
    limit = get_settings().START_ANSWER_TIMEOUT
    job = placed_job(session)
    later = T0 + dt.timedelta(seconds=limit + 1)
    run(
        session,
        later,
        # 138: refused for a port another process holds (workers/node/exits.py), retryable.
        beat(later, running=frozenset({(job.id, 1, 1)}), exited={(job.id, 1, 0): 138}),
    )
    replicas = {r.index: r for r in jobs.read_replicas(session=session, job=job)}
    assert replicas[0].status is ReplicaStatus.FAILED and replicas[0].exit_code == 138
    assert replicas[0].failure == ""  # its own exit, not declared lost
    assert job.status is JobStatus.RESTARTING and "exited with" in job.reason


def test_deadline_fails_the_job(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2, active_deadline_seconds=30)
    job.created_at = T0
    start_gang(session, job, T0)
    result = run(
        session,
        T0 + dt.timedelta(seconds=31),
        beat(T0 + dt.timedelta(seconds=31), frozenset({(job.id, 1, 0), (job.id, 1, 1)})),
        progress={(job.id, 1, i): (T0 + dt.timedelta(seconds=31)).timestamp() for i in (0, 1)},
    )
    assert job.status is JobStatus.FAILED
    assert job.reason == "exceeded active_deadline_seconds (30s since submission)"
    assert sorted(m.index for m in result.messages if hasattr(m, "index")) == [0, 1]


def test_ttl_cleans_scratch_once(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2, ttl_seconds_after_finished=60)
    start_gang(session, job, T0)
    for index in (0, 1):
        fail_replica(session, job, index, 0, T0)
    assert job.status is JobStatus.SUCCEEDED
    job.finished_at = T0
    assert not [
        m for m in run(session, T0 + dt.timedelta(seconds=30)).messages if isinstance(m, CleanupJob)
    ]
    due = run(session, T0 + dt.timedelta(seconds=61)).messages
    assert [m for m in due if isinstance(m, CleanupJob)] == [CleanupJob("n1", job.id)]
    assert job.cleaned_at is not None
    assert not [
        m for m in run(session, T0 + dt.timedelta(seconds=62)).messages if isinstance(m, CleanupJob)
    ]


def test_now_is_aware() -> None:
    assert utcnow().tzinfo is not None


def test_metric_points_of_an_old_attempt_are_refused(session: Session) -> None:
    from services.telemetry import metrics

    job = restarted_job(session)
    point = {
        "job_id": job.id,
        "replica": 1,
        "step": 7,
        "epoch": 0,
        "name": "loss",
        "value": 0.5,
        "ts": 1.0,
    }
    # A replica of the torn-down gang still talking: fenced off.
    assert metrics.insert_points(session=session, rows=[{**point, "attempt": 1}]) == []
    stored = metrics.insert_points(session=session, rows=[{**point, "attempt": 2}] * 2)
    assert [(r["attempt"], r["step"]) for r in stored] == [(2, 7)]  # once, though sent twice
