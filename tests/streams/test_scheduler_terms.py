"""A scheduler's term begins blind: Redis may have lost its data while it stood by (a
standby never saw the old generation marker, so it cannot tell a wipe happened). Its
first pass makes good what a wipe undoes — the current attempts, the silence of every
node and replica whose beats were erased — and only that pass: a later silence counts.

The scheduler here is the real one on the test database and Redis; only its dispatcher
keeps the messages instead of sending them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from services.wire.keys import attempt_key
from tests.streams.conftest import SIGNING_KEY, Kept


@pytest.fixture
def silent_gang(bus: redis.Redis, committed: Any) -> Iterator[tuple[int, str]]:
    """A running gang on a node, both last heard from longer ago than any timeout, and a
    Redis with none of their beats (as after a wipe): (job id, node id)."""
    from services.db import session_scope
    from services.models import Job, Node, Replica
    from services.settings import get_settings
    from services.statuses import JobStatus
    from tests.services.test_failures import beat, start_gang

    settings = get_settings()
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(
        seconds=max(settings.PROGRESS_TIMEOUT, settings.NODE_TIMEOUT) + 30
    )
    _, job_id = committed()
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        start_gang(session, job, long_ago)
        assert job.status is JobStatus.RUNNING
        session.execute(
            sa.update(Replica).where(Replica.job_id == job_id).values(progress_at=long_ago)
        )
    node_id = beat(long_ago).node_id
    bus.flushdb()
    yield job_id, node_id
    from services.jobs import store as jobs

    with session_scope() as session:  # the node goes too: no later test may place on it
        jobs.delete_jobs(session=session, job_ids=[job_id])
        session.execute(sa.delete(Node).where(Node.id == node_id))


def first_pass(bus: redis.Redis, *, blind: bool) -> Any:
    from services.cluster.fencing import begin_term
    from services.settings import get_settings
    from services.wire.signing import Keyring
    from workers.control.scheduler import Scheduler

    scheduler = Scheduler(get_settings(), bus, Kept(), Keyring(SIGNING_KEY))
    if not blind:  # the control: a term that would trust Redis' silence
        scheduler.unheard = False
    scheduler.run_pass(begin_term(lease=10))
    return scheduler


def job_status(job_id: int) -> str:
    from services.db import session_scope
    from services.models import Job

    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return str(job.status.value)


@pytest.mark.parametrize("blind", [True, False])
def test_a_new_terms_first_pass_excuses_the_silence_redis_may_have_erased(
    bus: redis.Redis, silent_gang: tuple[int, str], blind: bool
) -> None:
    job_id, _ = silent_gang
    scheduler = first_pass(bus, blind=blind)
    if not blind:  # the same silence, not excused: the node is lost, the gang torn down
        assert job_status(job_id) != "running"
        return
    assert job_status(job_id) == "running"
    # The current attempt is written again for the agents to fence stale starts with.
    assert bus.get(attempt_key(job_id)) in ("1", b"1")
    assert scheduler.unheard is False  # once: the term's next silence is the senders'


def test_a_pass_that_fails_before_it_commits_excuses_in_the_next(
    bus: redis.Redis, silent_gang: tuple[int, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.scheduling import scheduler_pass

    job_id, _ = silent_gang
    from services.cluster.fencing import begin_term
    from services.settings import get_settings
    from services.wire.signing import Keyring
    from workers.control.scheduler import Scheduler

    scheduler = Scheduler(get_settings(), bus, Kept(), Keyring(SIGNING_KEY))
    fence = begin_term(lease=10)
    real_pass = scheduler_pass.run_pass

    def failing(**_: Any) -> Any:
        raise RuntimeError("the pass failed")

    monkeypatch.setattr(scheduler_pass, "run_pass", failing)
    with pytest.raises(RuntimeError):
        scheduler.run_pass(fence)
    assert scheduler.unheard is True  # not done: kept for the next pass
    monkeypatch.setattr(scheduler_pass, "run_pass", real_pass)
    scheduler.run_pass(fence)
    assert job_status(job_id) == "running"
    assert scheduler.unheard is False
