"""The registry against PostgreSQL with real concurrent transactions: versions numbered
without gaps or repeats, alias moves racing leave one unbroken history; a schedule's
promotion registers a version and moves its alias; history limits keep registered jobs."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from services.db import session_scope
from services.jobs import store as jobs
from services.jobs.transitions import transition_job
from services.models import AliasMove, Job, ModelAlias, ModelVersion, Project
from services.registry import aliases, versions
from services.registry.promotion import model_of
from services.retraining import promoted, promotion
from services.storage.store import open_store
from tests.factories import create_job, create_token
from tests.services.test_schedules import T0, _report, finish, fire, make, runs


def _succeeded(session: Session, project_id: int) -> int:
    job = create_job(session, project_id, trainer="mlp_digits", replicas=1)
    for target in ("scheduled", "running", "succeeded"):
        transition_job(session=session, job_id=job.id, target=target, reason="test")  # type: ignore[arg-type]
    return job.id


@pytest.fixture
def own_project(engine: Engine) -> Iterator[Callable[[int], tuple[int, list[int]]]]:  # noqa: ARG001
    """Makes a project of its own (committed) with N succeeded jobs; deleted afterwards
    with all it holds, so no other test counts its rows."""
    names: list[str] = []

    def make(count: int) -> tuple[int, list[int]]:
        names.append(f"registry-{uuid.uuid4().hex[:8]}")
        with session_scope() as session:
            _, token = create_token(session, names[-1])
            return token.project_id, [_succeeded(session, token.project_id) for _ in range(count)]

    yield make
    with session_scope() as session:
        session.execute(sa.delete(Project).where(Project.name.in_(names)))


def _at_once(work: list[Callable[[], None]]) -> None:
    """Run each callable in its own thread, released together; re-raise any failure."""
    start, failures = threading.Barrier(len(work)), []

    def run(task: Callable[[], None]) -> None:
        try:
            start.wait(10)
            task()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(task,)) for task in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures


def test_registrations_racing_on_a_new_model_take_versions_one_to_n(
    own_project: Callable[[int], tuple[int, list[int]]],
) -> None:
    project_id, job_ids = own_project(8)

    def register(job_id: int) -> Callable[[], None]:
        def task() -> None:
            with session_scope() as session:
                versions.register_version(
                    session=session,
                    project_id=project_id,
                    name="raced",
                    job_id=job_id,
                    by="test",
                    store=open_store(),
                    look_for_model=False,
                )

        return task

    _at_once([register(job_id) for job_id in job_ids])
    with session_scope() as session:
        model = versions.read_model(session=session, project_id=project_id, name="raced")
        rows = versions.list_versions(session=session, model=model)
        assert model.latest_version == 8
        assert sorted(v.version for v in rows) == list(range(1, 9))
        assert sorted(v.job_id for v in rows) == sorted(job_ids)


def test_alias_moves_racing_leave_one_unbroken_history(
    own_project: Callable[[int], tuple[int, list[int]]],
) -> None:
    project_id, job_ids = own_project(3)
    with session_scope() as session:
        for job_id in job_ids:
            versions.register_version(
                session=session,
                project_id=project_id,
                name="m",
                job_id=job_id,
                by="t",
                store=open_store(),
                look_for_model=False,
            )

    def move(version: int, index: int) -> Callable[[], None]:
        def task() -> None:
            with session_scope() as session:
                model = versions.read_model(session=session, project_id=project_id, name="m")
                aliases.move_alias(
                    session=session,
                    model=model,
                    alias="production",
                    version=version,
                    by=f"mover {index}",
                    reason=f"move {index}",
                )

        return task

    _at_once([move(1 + index % 3, index) for index in range(12)])
    with session_scope() as session:
        model = versions.read_model(session=session, project_id=project_id, name="m")
        alias = aliases.read_alias(session=session, model=model, alias="production")
        moves = list(reversed(aliases.alias_history(session=session, alias=alias)))
        assert len(moves) == 12
        # Created once; then each move starts where the one before it ended.
        assert moves[0].from_version is None
        assert [m.from_version for m in moves[1:]] == [m.to_version for m in moves[:-1]]
        assert alias.version == moves[-1].to_version
        assert sorted(m.reason for m in moves) == sorted(f"move {i}" for i in range(12))
        count = session.execute(
            sa.select(sa.func.count())
            .select_from(ModelAlias)
            .where(ModelAlias.model_id == model.id)
        ).scalar_one()
        assert count == 1


def test_a_promotion_registers_a_version_and_moves_the_schedules_alias(session: Session) -> None:
    schedule = make(session, promote={"metric": "eval_accuracy", "mode": "max"})
    assert model_of(schedule) == ("nightly", "production")
    decided = []
    for second, value in ((10, 0.90), (20, 0.85), (30, 0.93)):
        (job_id,) = fire(session, T0 + dt.timedelta(seconds=second)).jobs
        finish(session, job_id)
        _report(session, job_id, value)
        promotion.decide_pending(session=session)
        decided.append(job_id)
    assert [r.decision for r in runs(session, schedule.id)] == ["promoted", "kept", "promoted"]
    model = versions.read_model(session=session, project_id=schedule.project_id, name="nightly")
    rows = versions.list_versions(session=session, model=model)
    # Every judged run is a version; the alias moved only to the better ones.
    assert [(v.version, v.job_id) for v in rows] == [
        (3, decided[2]),
        (2, decided[1]),
        (1, decided[0]),
    ]
    assert rows[0].lineage["schedule_name"] == "nightly"
    assert rows[0].lineage["metrics"]["eval_accuracy"] == 0.93
    assert rows[0].registered_by == f"schedule nightly (id {schedule.id})"
    alias = aliases.read_alias(session=session, model=model, alias="production")
    history = aliases.alias_history(session=session, alias=alias)
    assert [(m.from_version, m.to_version) for m in history] == [(1, 3), (None, 1)]
    assert "beats job" in history[0].reason
    assert runs(session, schedule.id)[1].decision_reason.endswith("registered as version 2")
    assert runs(session, schedule.id)[2].decision_reason.endswith("registered as version 3")
    # A rollback of the alias is what the schedule's promoted model says from then on.
    aliases.move_alias(session=session, model=model, alias="production", version=1, by="ops")
    read = promoted.read_promoted_model(session=session, schedule=schedule)
    assert (read.model, read.alias, read.version, read.job_id) == (
        "nightly",
        "production",
        1,
        decided[0],
    )
    assert read.value == 0.90
    # And the next run is judged against it: 0.91 beats v1's 0.90 (not v2's 0.93).
    (job_id,) = fire(session, T0 + dt.timedelta(seconds=40)).jobs
    finish(session, job_id)
    _report(session, job_id, 0.91)
    promotion.decide_pending(session=session)
    last = runs(session, schedule.id)[3]
    assert last.decision == "promoted", last.decision_reason
    assert f"beats job {decided[0]}'s 0.9 " in last.decision_reason
    alias = aliases.read_alias(session=session, model=model, alias="production")
    assert alias.version == 4


def test_a_promotion_goes_to_the_model_and_alias_the_schedule_names(session: Session) -> None:
    schedule = make(
        session, promote={"metric": "eval_accuracy", "model": "digits", "alias": "staging"}
    )
    (job_id,) = fire(session, T0 + dt.timedelta(seconds=10)).jobs
    finish(session, job_id)
    _report(session, job_id, 0.5)
    promotion.decide_pending(session=session)
    model = versions.read_model(session=session, project_id=schedule.project_id, name="digits")
    assert aliases.read_alias(session=session, model=model, alias="staging").version == 1
    assert session.execute(sa.select(AliasMove)).scalars().first() is not None


def test_history_limits_keep_a_registered_job(session: Session) -> None:
    schedule = make(session, successful_jobs_history_limit=0)
    ids = []
    for second in (10, 20, 30):
        (job_id,) = fire(session, T0 + dt.timedelta(seconds=second)).jobs  # prunes the ended
        finish(session, job_id)
        ids.append(job_id)
        if second == 10:
            versions.register_version(
                session=session,
                project_id=schedule.project_id,
                name="kept",
                job_id=job_id,
                by="t",
                store=open_store(),
                look_for_model=False,
            )
    fire(session, T0 + dt.timedelta(seconds=40))
    left = set(session.execute(sa.select(Job.id).where(Job.id.in_(ids))).scalars())
    assert left == {ids[0]}  # the registered one; the other two were pruned
    version = session.execute(sa.select(ModelVersion).where(ModelVersion.job_id == ids[0]))
    assert version.scalar_one().artifact == f"jobs/{ids[0]}/model"


def test_a_registered_jobs_row_cannot_be_deleted_but_its_project_can(
    own_project: Callable[[int], tuple[int, list[int]]],
) -> None:
    project_id, (job_id,) = own_project(1)
    with session_scope() as session:
        versions.register_version(
            session=session,
            project_id=project_id,
            name="m",
            job_id=job_id,
            by="t",
            store=open_store(),
            look_for_model=False,
        )
    with pytest.raises(sa.exc.IntegrityError, match="model_versions"):
        with session_scope() as session:
            jobs.delete_jobs(session=session, job_ids=[job_id])
    with session_scope() as session:
        assert session.get(Job, job_id) is not None
    # The fixture then deletes the project, its jobs and models with it, in one commit.
