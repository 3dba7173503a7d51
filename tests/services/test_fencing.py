"""Fencing tokens on real PostgreSQL (and on SQLite, the embedded default): a leadership
term whose token is no longer the newest commits nothing; the newest goes on.

These transactions commit for real (the fence is about concurrent transactions); the jobs
and nodes they make are deleted afterwards, so later passes on this database see none.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from services.cluster import gangs
from services.cluster.fencing import Fence, Fenced, begin_term, check_token, issue_token
from services.cluster.nodes import Heartbeat
from services.db import make_engine, session_scope
from services.jobs import store as jobs
from services.models import Job, Node, Project, Replica, utcnow
from services.scheduling import scheduler_pass
from services.settings import get_settings
from services.statuses import JobStatus, ReplicaStatus
from tests.e2e.conftest import wait_for
from tests.factories import create_job, create_token

NODE = "fence-n1"


@pytest.fixture
def queued_job(engine: Engine) -> Iterator[int]:  # noqa: ARG001 - the test database
    """A committed queued two-replica job of a project of its own; the project, the job and
    the test's node are deleted after. Not the "default" project: committed, it would be
    every later test's "default" (tests/factories.py create_token), and their files in the
    worker's one artifact store would meet (an upload found "replaced", another test's
    holdout found)."""
    project = f"fence-{uuid.uuid4().hex[:8]}"
    with session_scope() as session:
        _, token = create_token(session, project)
        job_id = create_job(session, token.project_id, replicas=2).id
    yield job_id
    with session_scope() as session:
        jobs.delete_jobs(session=session, job_ids=[job_id])
        session.execute(sa.delete(Node).where(Node.id == NODE))
        session.execute(sa.delete(Project).where(Project.name == project))


def run_pass(fence: Fence) -> scheduler_pass.PassResult:
    beat = Heartbeat(node_id=NODE, address="10.9.0.1", slots=2, gpus=0, at=utcnow())
    with fence.scope() as session:
        return scheduler_pass.run_pass(session=session, settings=get_settings(), heartbeats=[beat])


def job_state(job_id: int) -> tuple[JobStatus, list[tuple[int, ReplicaStatus]]]:
    with session_scope() as session:
        job = session.get_one(Job, job_id)
        replicas = session.execute(
            sa.select(Replica.index, Replica.status)
            .where(Replica.job_id == job_id)
            .order_by(Replica.index)
        ).all()
        return job.status, [(index, status) for index, status in replicas]


def test_each_term_gets_a_larger_token(engine: Engine) -> None:  # noqa: ARG001
    first, second = begin_term(lease=10), begin_term(lease=10)
    assert second.token > first.token


def test_an_older_terms_pass_is_refused_and_writes_nothing(queued_job: int) -> None:
    old = begin_term(lease=10)
    new = begin_term(lease=10)  # another scheduler took over while `old` was stalled
    with pytest.raises(Fenced) as refused:
        run_pass(old)
    assert (refused.value.token, refused.value.newest) == (old.token, new.token)
    assert job_state(queued_job) == (JobStatus.QUEUED, [])
    with session_scope() as session:  # not even the heartbeat was recorded
        assert session.get(Node, NODE) is None

    result = run_pass(new)
    assert result.placed == [queued_job]
    assert job_state(queued_job) == (
        JobStatus.SCHEDULED,
        [(0, ReplicaStatus.PENDING), (1, ReplicaStatus.PENDING)],
    )


def test_an_older_terms_event_is_refused_and_the_newer_applies_it(queued_job: int) -> None:
    old = begin_term(lease=10)
    run_pass(old)  # placed while `old` still led

    def replica_started(fence: Fence) -> None:
        with fence.scope() as session:
            gangs.record_replica_started(
                session=session, job_id=queued_job, attempt=1, index=0, pid=4242, at=utcnow()
            )

    new = begin_term(lease=10)
    with pytest.raises(Fenced):
        replica_started(old)
    assert job_state(queued_job)[1][0] == (0, ReplicaStatus.PENDING)
    replica_started(new)
    assert job_state(queued_job)[1][0] == (0, ReplicaStatus.RUNNING)


def test_a_new_term_waits_for_the_old_terms_open_transaction(engine: Engine) -> None:  # noqa: ARG001
    """The old term's transaction checked its token before the new one was issued: it
    commits, and the new token is issued only after it (never between check and commit)."""
    old = begin_term(lease=10)
    issued: list[tuple[int, float]] = []

    def take_over() -> None:
        fence = begin_term(lease=10)
        issued.append((fence.token, time.monotonic()))

    with old.scope() as session:
        session.execute(sa.select(1))
        thread = threading.Thread(target=take_over)
        thread.start()
        thread.join(0.5)  # it must still be waiting on this transaction
        assert issued == []
        committed_at = time.monotonic()
    thread.join(10)
    assert issued and issued[0][0] == old.token + 1 and issued[0][1] >= committed_at


def test_a_frozen_leaders_open_transaction_is_ended_after_its_lease(engine: Engine) -> None:  # noqa: ARG001
    """A leader frozen inside a transaction holds the fence's row: PostgreSQL ends that
    transaction after `lease` seconds idle, so the next leader's token is not held up."""
    old = Fence(begin_term(lease=10).token, lease=1.0)
    checked, resume = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def frozen_leader() -> None:
        try:
            with old.scope() as session:
                checked.set()
                resume.wait(30)  # frozen, as under SIGSTOP
                session.execute(sa.select(1))
        except BaseException as exc:  # reported to the test
            errors.append(exc)

    thread = threading.Thread(target=frozen_leader)
    thread.start()
    assert checked.wait(10)
    started = time.monotonic()
    new = begin_term(lease=10)
    waited = time.monotonic() - started
    resume.set()
    thread.join(10)
    assert new.token == old.token + 1
    assert waited < 1.0 + 5.0  # the lease, and room for a busy machine
    assert len(errors) == 1 and isinstance(errors[0], sa.exc.DBAPIError)
    assert "idle-in-transaction timeout" in str(errors[0])


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    """A migrated SQLite database in WAL mode, as the embedded default runs it."""
    from cli.stack import migrate

    url = f"sqlite:///{tmp_path / 'fence.db'}"
    migrate(url)
    engine = make_engine(url)
    yield engine
    engine.dispose()


def test_sqlite_refuses_an_older_token_and_serialises_the_newer(sqlite_engine: Engine) -> None:
    def issue() -> int:
        with Session(sqlite_engine) as session, session.begin():
            return issue_token(session=session)

    old = issue()
    issued: list[tuple[int, float]] = []
    with Session(sqlite_engine) as session, session.begin():
        check_token(session=session, token=old)
        # The check took the write lock: a new term's token waits for this commit.
        thread = threading.Thread(target=lambda: issued.append((issue(), time.monotonic())))
        thread.start()
        thread.join(0.5)
        assert issued == []
        committed_at = time.monotonic()
    wait_for(lambda: issued, 15, "the new token")
    assert issued[0][0] == old + 1 and issued[0][1] >= committed_at
    with Session(sqlite_engine) as session, session.begin(), pytest.raises(Fenced):
        check_token(session=session, token=old)
    with Session(sqlite_engine) as session, session.begin():
        check_token(session=session, token=old + 1)
