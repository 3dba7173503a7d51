"""The leader's ingest on real Redis and PostgreSQL: exactly-once storage, the live feed,
and replica logs shipped by the agent's LogShipper."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa

from services.wire.keys import LOGS_STREAM
from tests.factories import assert_rollups_match_points
from tests.streams.conftest import ingest_until, ship_points


def test_thousand_batches_delivered_twice_are_stored_once(bus: redis.Redis, committed: Any) -> None:
    from services.db import session_scope
    from services.models import MetricPoint
    from services.telemetry import live
    from services.wire import keys

    _, job_id = committed()
    batches = [
        json.dumps(
            {
                "job_id": job_id,
                "attempt": 1,
                "replica": i % 2,
                "points": [
                    [i // 2 + 1, 0, name, float(i), 1.0 + i]
                    for name in ("loss", "accuracy", "step_time")
                ],
            }
        )
        for i in range(1000)
    ]
    pipe = bus.pipeline()
    for raw in batches + batches:  # every batch delivered twice
        pipe.xadd("cohort:metrics", {"data": raw})
    pipe.execute()
    assert ingest_until(bus, 3000) == 3000
    assert ingest_until(bus, 1, timeout=1) == 0  # the second copies added nothing
    with session_scope() as session:
        stored = session.execute(
            sa.select(sa.func.count()).select_from(MetricPoint).where(MetricPoint.job_id == job_id)
        ).scalar_one()
        distinct = session.execute(
            sa.select(sa.func.count()).select_from(
                sa.select(MetricPoint.replica, MetricPoint.step, MetricPoint.name)
                .where(MetricPoint.job_id == job_id)
                .distinct()
                .subquery()
            )
        ).scalar_one()
    assert stored == distinct == 3000
    with session_scope() as session:  # each point summed into its rollup once
        assert assert_rollups_match_points(session, job_id) == 2 * 3 * 6  # replica, name, 100s
    # The live feed carries each stored row once, with increasing ids.
    ids = [
        row[0]
        for _, fields in bus.xrange(keys.live_key(job_id))
        for row in json.loads(fields["rows"])
    ]
    assert len(ids) == 3000 and ids == sorted(set(ids))
    assert live.read_stats(bus)["metric_rows"] == 3000
    assert bus.xpending("cohort:metrics", "cohort-scheduler")["pending"] == 0


def test_malformed_batches_do_not_stall_the_ingest(bus: redis.Redis, committed: Any) -> None:
    from services.db import session_scope
    from services.models import MetricPoint

    _, job_id = committed()
    good = {"job_id": job_id, "attempt": 1, "replica": 0}
    for data in (
        json.dumps({**good, "points": [[1, 0, "loss", 1.0, 1.0], [2**40, 0, "loss", 1.0, 1.0]]}),
        json.dumps({**good, "job_id": 2**40, "points": [[1, 0, "loss", 1.0, 1.0]]}),
        "{not json",
        json.dumps({**good, "points": [[2, 0, "lo\x00ss", 1.0, 1.0], [2, 0, "loss", 2.0, 2.0]]}),
    ):
        bus.xadd("cohort:metrics", {"data": data})
    assert ingest_until(bus, 2) == 2
    with session_scope() as session:
        steps = (
            session.execute(
                sa.select(MetricPoint.step)
                .where(MetricPoint.job_id == job_id)
                .order_by(MetricPoint.step)
            )
            .scalars()
            .all()
        )
    assert steps == [1, 2]
    assert bus.xpending("cohort:metrics", "cohort-scheduler")["pending"] == 0


def test_malformed_log_batches_do_not_stall_the_ingest(bus: redis.Redis, committed: Any) -> None:
    from services.db import session_scope
    from services.telemetry import logs

    _, job_id = committed()
    head = {"job_id": job_id, "attempt": 1, "replica": 0}
    for data in (
        json.dumps({**head, "lines": [[2**40, 1.0, "too far"], [1, 1.0, "one"]]}),
        # A lone surrogate (JSON-escaped): no SQL text column can hold it.
        json.dumps({**head, "lines": [[2, 1.0, "\ud800"]]}),
        json.dumps({**head, "lines": [[3, 2.0, "three"]]}),
    ):
        bus.xadd(LOGS_STREAM, {"data": data})
    assert ingest_until(bus, 2, kind="log") == 2
    with session_scope() as session:
        assert [line.line for line in logs.read_logs(session=session, job_id=job_id)] == [
            "one",
            "three",
        ]
    assert bus.xpending(LOGS_STREAM, "cohort-scheduler")["pending"] == 0


def test_a_job_being_ingested_is_not_deleted_under_its_points(committed: Any) -> None:
    """The ingest's share lock stands in for the foreign key the series tables lack, and
    a status change of the job waits for it: the change's marks (where it stands among the
    job's points and lines) cannot miss rows committed after they were read."""
    from sqlalchemy.exc import OperationalError

    from services.db import session_scope
    from services.jobs import store as jobs
    from services.jobs.transitions import transition_job
    from services.models import Job, MetricPoint, MetricRollup
    from services.statuses import JobStatus
    from services.telemetry import metrics

    _, job_id = committed()
    with session_scope() as ingest:
        assert metrics.current_attempts(session=ingest, job_ids={job_id}) == {job_id: 1}
        with session_scope() as deleter:
            deleter.execute(sa.text("SET LOCAL lock_timeout = '300ms'"))
            try:
                jobs.delete_jobs(session=deleter, job_ids=[job_id])
            except OperationalError as exc:
                assert "lock timeout" in str(exc)
                deleter.rollback()
            else:
                raise AssertionError("the job was deleted while its points were being stored")
        # ...nor does its status change until the rows are committed.
        with session_scope() as scheduler:
            scheduler.execute(sa.text("SET LOCAL lock_timeout = '300ms'"))
            try:
                transition_job(
                    session=scheduler,
                    job_id=job_id,
                    target=JobStatus.CANCELLED,
                    reason="cancelled by user",
                )
            except OperationalError as exc:
                assert "lock timeout" in str(exc)
                scheduler.rollback()
            else:
                raise AssertionError("the job's status changed while its rows were stored")
        metrics.insert_points(
            session=ingest,
            rows=[
                {
                    "job_id": job_id,
                    "attempt": 1,
                    "replica": 0,
                    "step": 1,
                    "epoch": 0,
                    "name": "loss",
                    "value": 1.0,
                    "ts": 1.0,
                }
            ],
        )
    with session_scope() as session:
        jobs.delete_jobs(session=session, job_ids=[job_id])
    with session_scope() as session:
        assert session.get(Job, job_id) is None
        for series in (MetricPoint, MetricRollup):  # its series went with it
            assert (
                session.execute(
                    sa.select(sa.func.count()).select_from(series).where(series.job_id == job_id)
                ).scalar_one()
                == 0
            )


def test_log_shipper_lines_match_the_file(bus: redis.Redis, committed: Any, tmp_path: Path) -> None:
    from services.db import session_scope
    from services.telemetry import logs
    from workers.node.launcher import ReplicaKey
    from workers.node.logship import LogShipper

    _, job_id = committed()
    path = tmp_path / "replica-0.log"
    printed = [f"line {i} ünïcode" for i in range(1200)] + ["", "no newline at the end"]
    path.write_text("\n".join(printed[:600]) + "\n")
    shipper = LogShipper(bus, ReplicaKey(job_id, 1, 0), path, poll_seconds=0.05)
    shipper.start()
    with open(path, "a") as handle:
        handle.write("\n".join(printed[600:]))
    shipper.finish()
    assert shipper.seq == len(printed)
    assert ingest_until(bus, len(printed), kind="log") == len(printed)
    with session_scope() as session:
        tail = logs.read_logs(session=session, job_id=job_id, replica=0, tail=5)
        everything = logs.read_logs(session=session, job_id=job_id, attempt=1)
    assert [r.line for r in tail] == printed[-5:]
    assert [r.line for r in everything] == printed
    assert [r.seq for r in everything] == list(range(1, len(printed) + 1))
    # A redelivered batch stores nothing new.
    bus.xadd(
        "cohort:logs",
        {
            "data": json.dumps(
                {"job_id": job_id, "attempt": 1, "replica": 0, "lines": [[1, 0.0, "again"]]}
            )
        },
    )
    assert ingest_until(bus, 1, kind="log", timeout=1) == 0


def test_a_job_deleted_while_its_points_are_being_stored_leaves_none_behind(committed: Any) -> None:
    """The delete waits for the ingest's commit, and then deletes what it stored."""
    import threading

    from services.db import session_scope
    from services.jobs import store as jobs
    from services.models import LogLine, MetricPoint, MetricRollup
    from services.telemetry import metrics
    from tests.e2e.conftest import wait_for

    _, job_id = committed()
    deleted = threading.Event()

    def delete() -> None:
        with session_scope() as session:
            jobs.delete_jobs(session=session, job_ids=[job_id])
        deleted.set()

    def someone_waits_for_a_lock() -> bool:
        with session_scope() as session:
            return bool(
                session.execute(
                    sa.text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND wait_event_type = 'Lock'"
                    )
                ).scalar_one()
            )

    deleter = threading.Thread(target=delete)
    with session_scope() as ingest:
        metrics.insert_points(
            session=ingest,
            rows=[
                {
                    "job_id": job_id,
                    "attempt": 1,
                    "replica": 0,
                    "step": 1,
                    "epoch": 0,
                    "name": "loss",
                    "value": 1.0,
                    "ts": 1.0,
                }
            ],
        )
        deleter.start()
        wait_for(someone_waits_for_a_lock, 10, "the delete to wait for the ingest")
        assert not deleted.is_set()
    deleter.join(10)
    assert deleted.is_set()
    with session_scope() as session:
        for series in (MetricPoint, MetricRollup, LogLine):
            assert (
                session.execute(
                    sa.select(sa.func.count()).select_from(series).where(series.job_id == job_id)
                ).scalar_one()
                == 0
            )


def test_a_new_leadership_term_never_runs_a_second_ingester(
    bus: redis.Redis, committed: Any, monkeypatch: Any
) -> None:
    """A leader that lost its lock and won it back while its last ingest thread was still
    busy: the new term's thread waits, so at no time do two store the same entries; the
    old term's thread is fenced off by the new term's token and ends."""
    import threading
    import time

    from services.cluster.fencing import begin_term
    from workers.control import ingest
    from workers.control.term import Term

    _, job_id = committed()
    busy = 0
    most = 0
    real = ingest.ingest_once
    guard = threading.Lock()

    def counted(
        client: redis.Redis,
        feed: Any,
        *,
        sessions: Any,
        block_ms: int = 1000,  # noqa: ARG001
        reader: Any = None,
    ) -> int:
        nonlocal busy, most
        with guard:
            busy += 1
            most = max(most, busy)
        try:
            time.sleep(0.05)  # a slow statement
            return real(client, feed, block_ms=50, sessions=sessions, reader=reader)
        finally:
            with guard:
                busy -= 1

    monkeypatch.setattr(ingest, "ingest_once", counted)
    old = Term(begin_term(lease=10))
    first = threading.Thread(target=ingest.ingest_while, args=(bus, ingest.METRICS, old))
    first.start()
    # The lock lost and won again: the scheduler starts the next term's thread.
    new = Term(begin_term(lease=10))
    second = threading.Thread(target=ingest.ingest_while, args=(bus, ingest.METRICS, new))
    second.start()
    for step in range(1, 41):
        ship_points(bus, job_id, [[step, 0, "loss", 0.5, 1.0]])
        time.sleep(0.01)
    from services.db import session_scope
    from services.models import MetricPoint

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with session_scope() as session:
            stored = session.execute(
                sa.select(sa.func.count())
                .select_from(MetricPoint)
                .where(MetricPoint.job_id == job_id)
            ).scalar_one()
        if stored == 40:
            break
        time.sleep(0.1)
    new.leading.clear()
    first.join(10)
    second.join(10)
    assert stored == 40
    assert not old.leading.is_set()  # fenced at its first store
    assert most == 1
    assert not first.is_alive() and not second.is_alive()
