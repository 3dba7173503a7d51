"""Grouped admission of job submissions on PostgreSQL, committing for real, in a project of
its own that each test deletes afterwards: every request gets its own job id or its own
error, the quota holds across a group, a failing insert fails only its own submission, and
a group whose transaction fails is admitted again one submission at a time."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from services.auth import tokens
from services.db import session_scope
from services.exceptions import BeyondQuota, IdempotencyConflict, QuotaExceeded
from services.jobs import quotas
from services.jobs.quota_schemas import QuotaUpdate
from services.jobs.schemas import JobCreate
from services.jobs.store import Admitted, Submission, admit_submissions
from services.jobs.submission_batcher import SubmissionBatcher
from services.models import Job, JobEvent, Project
from services.settings import get_settings


def spec(**fields: object) -> JobCreate:
    return JobCreate.model_validate({"strategy": "one_device", "replicas": 1, **fields})


@pytest.fixture
def project(engine: Engine) -> Iterator[int]:
    name = f"batch-{uuid.uuid4().hex[:8]}"
    with Session(engine) as session, session.begin():
        project_id = tokens.ensure_project(session=session, name=name).id
        quotas.set_quota(
            session=session,
            project_name=name,
            settings=get_settings(),
            quota_in=QuotaUpdate(max_queued_jobs=1000, max_priority=5),
        )
    yield project_id
    with Session(engine) as session, session.begin():
        session.execute(sa.delete(Job).where(Job.project_id == project_id))
        session.execute(sa.delete(Project).where(Project.id == project_id))


def set_queued_quota(engine: Engine, project_id: int, limit: int) -> None:
    with Session(engine) as session, session.begin():
        name = session.get_one(Project, project_id).name
        quotas.set_quota(
            session=session,
            project_name=name,
            settings=get_settings(),
            quota_in=QuotaUpdate(max_queued_jobs=limit, max_priority=5),
        )


def stored(engine: Engine, project_id: int) -> list[Job]:
    with Session(engine) as session:
        return list(
            session.execute(
                sa.select(Job).where(Job.project_id == project_id).order_by(Job.id)
            ).scalars()
        )


def events_of(engine: Engine, job_ids: list[int]) -> int:
    with Session(engine) as session:
        return session.execute(
            sa.select(sa.func.count())
            .select_from(JobEvent)
            .where(JobEvent.job_id.in_(job_ids), JobEvent.reason == "submitted")
        ).scalar_one()


def submit_concurrently(
    batcher: SubmissionBatcher, submissions: list[Submission]
) -> list[Admitted | Exception]:
    """Each submission from a thread of its own, all released at once; outcomes in order."""
    barrier = threading.Barrier(len(submissions))
    outcomes: list[Admitted | Exception | None] = [None] * len(submissions)

    def one(index: int) -> None:
        barrier.wait(timeout=30)
        try:
            outcomes[index] = batcher.submit(submissions[index], get_settings())
        except Exception as exc:  # the request's own error: part of the outcome
            outcomes[index] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(submissions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert all(o is not None for o in outcomes)
    return [o for o in outcomes if o is not None]


@pytest.fixture
def batcher() -> Iterator[SubmissionBatcher]:
    own = SubmissionBatcher()
    yield own
    own.close()


def test_concurrent_requests_each_get_their_own_committed_job(
    engine: Engine, project: int, batcher: SubmissionBatcher
) -> None:
    submissions = [Submission(project, spec(name=f"j{i}")) for i in range(40)]
    outcomes = submit_concurrently(batcher, submissions)
    assert all(isinstance(o, Admitted) and o.created for o in outcomes), outcomes
    admitted = [o for o in outcomes if isinstance(o, Admitted)]
    ids = [o.job.id for o in admitted]
    assert len(set(ids)) == 40
    # Each request's job is its own spec, stored with its `submitted` event.
    assert [o.job.name for o in admitted] == [f"j{i}" for i in range(40)]
    rows = stored(engine, project)
    assert sorted(j.id for j in rows) == sorted(ids)
    assert {j.id: j.name for j in rows} == {o.job.id: o.job.name for o in admitted}
    assert events_of(engine, ids) == 40
    # The place each was told is the one the queue gives it now (one priority, nothing
    # placed: no job has gone before another since).
    from services.jobs.queue import queue_positions

    with Session(engine) as session:
        places = queue_positions(session=session, jobs=rows)
    assert {o.job.id: o.queue_position for o in admitted} == places


def test_errors_stay_with_their_own_request(
    engine: Engine, project: int, batcher: SubmissionBatcher
) -> None:
    first = batcher.submit(Submission(project, spec(name="keyed"), "key-1"), get_settings())
    submissions = [Submission(project, spec(name=f"ok{i}")) for i in range(10)]
    submissions[3] = Submission(project, spec(name="too-high", priority=9))
    submissions[5] = Submission(project, spec(name="other"), "key-1")  # another spec
    submissions[7] = Submission(project, spec(name="keyed"), "key-1")  # a retry
    outcomes = submit_concurrently(batcher, submissions)
    assert isinstance(outcomes[3], BeyondQuota) and outcomes[3].field == "priority"
    assert isinstance(outcomes[5], IdempotencyConflict)
    assert isinstance(outcomes[7], Admitted) and not outcomes[7].created
    assert outcomes[7].job.id == first.job.id
    created = [o for i, o in enumerate(outcomes) if i not in (3, 5, 7)]
    assert all(isinstance(o, Admitted) and o.created for o in created)
    assert len(stored(engine, project)) == 1 + 7


def test_the_quota_holds_across_concurrent_groups(
    engine: Engine, project: int, batcher: SubmissionBatcher
) -> None:
    set_queued_quota(engine, project, 5)
    outcomes = submit_concurrently(
        batcher, [Submission(project, spec(name=f"q{i}")) for i in range(30)]
    )
    admitted = [o for o in outcomes if isinstance(o, Admitted)]
    refused = [o for o in outcomes if isinstance(o, QuotaExceeded)]
    assert len(admitted) == 5 and len(refused) == 25, outcomes
    assert all((r.used, r.allowed) == (5, 5) for r in refused)
    assert len(stored(engine, project)) == 5


def test_a_repeated_key_within_one_group_is_one_job(engine: Engine, project: int) -> None:
    with session_scope() as session:
        outcomes = admit_submissions(
            session=session,
            settings=get_settings(),
            submissions=[
                Submission(project, spec(name="a"), "same"),
                Submission(project, spec(name="a"), "same"),
                Submission(project, spec(name="b"), "same"),
            ],
        )
    assert isinstance(outcomes[0], Admitted) and outcomes[0].created
    assert isinstance(outcomes[1], Admitted) and not outcomes[1].created
    assert outcomes[1].job.id == outcomes[0].job.id
    assert isinstance(outcomes[2], IdempotencyConflict)
    assert len(stored(engine, project)) == 1


def test_a_failing_insert_fails_only_its_own_submission(engine: Engine, project: int) -> None:
    with session_scope() as session:
        outcomes = admit_submissions(
            session=session,
            settings=get_settings(),
            submissions=[
                Submission(project, spec(name="a")),
                # A trial of a sweep that does not exist: its insert breaks a foreign key.
                Submission(project, spec(name="orphan"), trial_of=(2**31 - 1, 0)),
                Submission(project, spec(name="c"), "k"),
            ],
        )
    assert isinstance(outcomes[1], IntegrityError)
    assert [o.job.name for o in outcomes if isinstance(o, Admitted)] == ["a", "c"]
    rows = stored(engine, project)
    assert [j.name for j in rows] == ["a", "c"]
    assert events_of(engine, [j.id for j in rows]) == 2
    # Places as if the orphan had never been submitted.
    assert [o.queue_position for o in outcomes if isinstance(o, Admitted)] == [1, 2]


def test_a_group_whose_transaction_fails_is_admitted_one_by_one(
    engine: Engine, project: int
) -> None:
    gate = threading.Event()
    transactions: list[int] = []

    @contextmanager
    def sessions() -> Iterator[Session]:
        transactions.append(1)
        number = len(transactions)
        if number == 1:
            assert gate.wait(30)  # the first group waits while the others queue up
        with session_scope() as session:
            yield session
            if number == 2:  # the second group, of several, fails as a whole
                raise OperationalError("COMMIT", {}, Exception("connection lost"))

    batcher = SubmissionBatcher(sessions=sessions, threads=1)  # one group at a time
    try:
        results: list[Admitted] = []
        first = threading.Thread(
            target=lambda: results.append(
                batcher.submit(Submission(project, spec(name="first")), get_settings())
            )
        )
        first.start()
        while not transactions:
            threading.Event().wait(0.01)
        others = [
            threading.Thread(
                target=lambda i=i: results.append(
                    batcher.submit(Submission(project, spec(name=f"o{i}")), get_settings())
                )
            )
            for i in range(5)
        ]
        for thread in others:
            thread.start()
        while batcher._queue.qsize() < 5:
            threading.Event().wait(0.01)
        gate.set()
        for thread in [first, *others]:
            thread.join(60)
    finally:
        batcher.close()
    assert len(transactions) == 2 + 5  # the failed group, then each of its five alone
    assert sorted(o.job.name for o in results) == ["first", "o0", "o1", "o2", "o3", "o4"]
    assert len({o.job.id for o in results}) == 6
    assert sorted(j.name for j in stored(engine, project)) == [
        "first",
        "o0",
        "o1",
        "o2",
        "o3",
        "o4",
    ]


@pytest.mark.parametrize("fails", [False, True], ids=["inserted", "undone"])
def test_a_round_leaves_the_connections_insert_page_size_as_it_found_it(
    project: int, fails: bool
) -> None:
    # A round inserts its jobs one statement a row; what the same transaction inserts
    # after it (a pass's placed replicas, after it created sweep trials) must not be.
    with session_scope() as session:
        connection = session.connection()
        default = connection.dialect.insertmanyvalues_page_size
        trial_of = (2**31 - 1, 0) if fails else None  # no such sweep: a foreign key breaks
        admit_submissions(
            session=session,
            settings=get_settings(),
            submissions=[Submission(project, spec(name="paged"), trial_of=trial_of)],
        )
        options = session.connection().get_execution_options()
        assert options.get("insertmanyvalues_page_size", default) == default
