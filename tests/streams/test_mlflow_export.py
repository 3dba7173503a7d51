"""The MLflow export against a real `mlflow server` (SQLite backend), real Redis and
PostgreSQL: points stored by the leader's ingest reach the run once each across an
exporter that died between MLflow's answer and its commit; a server that goes down makes
the export wait and retry while the job and the ingest go on; turning tracking on sends a
project's jobs in flight and to come, never its history."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from services.db import session_scope
from services.jobs import store as jobs
from services.jobs.transitions import transition_job
from services.models import JobEvent, MetricPoint, MlflowRun, utcnow
from services.settings import get_settings
from services.statuses import JobStatus
from services.tracking import exports, targets
from services.tracking.client import RunWriter
from services.tracking.exporter import Exporter
from services.tracking.run_fields import metric_key
from services.tracking.schemas import TrackingUpdate
from services.wire.keys import METRICS_STREAM
from tests.e2e.conftest import wait_for
from tests.factories import create_job, create_token
from tests.mlflowserver import MlflowServer
from tests.streams.conftest import ingest_until


@pytest.fixture
def tracked(bus: redis.Redis, mlflow_server: MlflowServer) -> Iterator[dict[str, Any]]:  # noqa: ARG001
    """A project of its own tracked on the test server, in an experiment of its own; its
    jobs are deleted and its tracking turned off afterwards."""
    name = f"mlflow-{uuid.uuid4().hex[:8]}"
    with session_scope() as session:
        _, token = create_token(session, name)
        targets.set_tracking(
            session=session,
            project_name=name,
            tracking_in=TrackingUpdate(tracking_uri=mlflow_server.uri, experiment=name),
            settings=get_settings(),
        )
    made: list[int] = []
    yield {"name": name, "project_id": token.project_id, "jobs": made}
    with session_scope() as session:
        jobs.delete_jobs(session=session, job_ids=made)
        targets.set_tracking(
            session=session,
            project_name=name,
            tracking_in=TrackingUpdate(tracking_uri=""),
            settings=get_settings(),
        )


def running_job(project: dict[str, Any], **spec: Any) -> int:
    with session_scope() as session:
        job = create_job(
            session,
            project["project_id"],
            **{"name": "exported", "strategy": "multi_worker_mirrored", "replicas": 2, **spec},
        )
        project["jobs"].append(job.id)
    for status in (JobStatus.SCHEDULED, JobStatus.RUNNING):
        with session_scope() as session:
            transition_job(session=session, job_id=job.id, target=status)
    return job.id


def finish(job_id: int, status: JobStatus = JobStatus.SUCCEEDED) -> None:
    with session_scope() as session:
        transition_job(session=session, job_id=job_id, target=status, reason="done")


def report(bus: redis.Redis, job_id: int, steps: range, replicas: int = 2) -> int:
    """Points of every replica through the metrics stream and the real ingest."""
    for replica in range(replicas):
        points = [
            [step, 0, name, float(step * (replica + 1)) + (0.5 if name == "acc" else 0), 1e9 + step]
            for step in steps
            for name in ("loss", "acc")
        ]
        bus.xadd(
            METRICS_STREAM,
            {
                "data": json.dumps(
                    {"job_id": job_id, "attempt": 1, "replica": replica, "points": points}
                )
            },
        )
    expected = replicas * len(steps) * 2
    assert ingest_until(bus, expected) == expected
    return expected


def stored_points(job_id: int) -> list[tuple[str, int, float, int]]:
    """What Cohort stored, as MLflow should hold it: (key, step, value, ms), sorted."""
    with session_scope() as session:
        rows = session.execute(
            sa.select(
                MetricPoint.replica,
                MetricPoint.name,
                MetricPoint.step,
                MetricPoint.value,
                MetricPoint.ts,
            ).where(MetricPoint.job_id == job_id)
        ).all()
    return sorted((metric_key(n, r), s, v, int(ts * 1000)) for r, n, s, v, ts in rows)


def mlflow_run(server: MlflowServer, experiment: str, job_id: int) -> Any:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=server.uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    runs = client.search_runs([found.experiment_id], f"tags.`cohort.job_id` = '{job_id}'")
    assert len(runs) <= 1, runs  # one run a job, however often it was tried
    return runs[0] if runs else None


def mlflow_points(server: MlflowServer, run: Any) -> list[tuple[str, int, float, int]]:
    """Every value of every series of the run, read back through MLflow's client."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=server.uri)
    return sorted(
        (key, m.step, m.value, m.timestamp)
        for key in run.data.metrics
        for m in client.get_metric_history(run.info.run_id, key)
    )


def export_row(job_id: int) -> MlflowRun:
    with session_scope() as session:
        return session.get_one(MlflowRun, job_id)


def events(job_id: int) -> list[str]:
    with session_scope() as session:
        return list(
            session.execute(
                sa.select(JobEvent.reason).where(JobEvent.job_id == job_id).order_by(JobEvent.id)
            ).scalars()
        )


class Crash(Exception):
    """The exporter's process dying between MLflow's answer and its own commit."""


def test_an_exporter_killed_mid_run_loses_and_repeats_no_point(
    bus: redis.Redis, tracked: dict[str, Any], mlflow_server: MlflowServer
) -> None:
    class CrashingWriter(RunWriter):
        batches = 0

        def log(self, run_id: str, **kwargs: Any) -> None:
            super().log(run_id, **kwargs)
            if kwargs.get("metrics"):
                CrashingWriter.batches += 1
                if CrashingWriter.batches == 2:  # MLflow has the second batch; SQL does not
                    raise Crash

    first = Exporter(get_settings(), bus, writer=CrashingWriter)
    first.run_round()  # the project's start: its jobs from now on
    job_id = running_job(tracked, hyperparameters={"learning_rate": 0.05, "opt": {"beta": 0.9}})
    report(bus, job_id, range(1, 751))  # 3,000 points: three batches
    with pytest.raises(Crash):
        first.run_round()
    assert export_row(job_id).metric_cursor > 0 and export_row(job_id).points == 1000

    again = Exporter(get_settings(), bus)  # a new leader: only SQL is left of the first
    assert again.run_round().points == 2000  # the second batch sent again, and the third
    report(bus, job_id, range(751, 801))  # points still coming
    finish(job_id)
    wait_for(lambda: again.run_round() and export_row(job_id).ended_at, 30, "the run's end")

    run = mlflow_run(mlflow_server, tracked["name"], job_id)
    assert mlflow_points(mlflow_server, run) == stored_points(job_id)  # each once, all
    assert len(stored_points(job_id)) == 3200
    assert set(run.data.metrics) == {"loss", "acc", "replica_1/loss", "replica_1/acc"}
    assert run.info.status == "FINISHED" and run.info.run_name == f"exported-{job_id}"
    assert run.data.params["learning_rate"] == "0.05" and run.data.params["opt.beta"] == "0.9"
    assert run.data.params["cohort.strategy"] == "multi_worker_mirrored"
    assert run.data.params["cohort.replicas"] == "2"
    tags = run.data.tags
    assert (tags["cohort.job_id"], tags["cohort.project"]) == (str(job_id), tracked["name"])
    assert (tags["cohort.status"], tags["cohort.replicas"]) == ("succeeded", "2")
    assert tags["cohort.model_uri"].endswith(f"/jobs/{job_id}/model")


def test_mlflow_down_is_retried_later_and_the_job_goes_on(
    bus: redis.Redis, tracked: dict[str, Any], mlflow_server: MlflowServer
) -> None:
    exporter = Exporter(get_settings(), bus, retry_max=0.5)
    exporter.run_round()
    job_id = running_job(tracked)
    report(bus, job_id, range(1, 51))
    mlflow_server.stop()
    try:
        assert exporter.run_round().failed == 1
        row = export_row(job_id)
        assert row.failures == 1 and "unreachable" in row.error and row.run_id is None
        assert any(e.startswith("MLflow export failing, retrying: ") for e in events(job_id))
        report(bus, job_id, range(51, 101))  # the ingest goes on
        finish(job_id)  # and so does the job
        wait_for(  # still down: the run waits, and is tried again later
            lambda: exporter.run_round() and export_row(job_id).failures >= 2, 10, "a retry"
        )
    finally:
        mlflow_server.start()
    wait_for(lambda: exporter.run_round() and export_row(job_id).ended_at, 30, "the run's end")
    run = mlflow_run(mlflow_server, tracked["name"], job_id)
    assert mlflow_points(mlflow_server, run) == stored_points(job_id)
    assert len(stored_points(job_id)) == 400
    assert run.info.status == "FINISHED"
    assert export_row(job_id).failures == 0 and export_row(job_id).error == ""


def test_tracking_turned_on_sends_jobs_in_flight_and_to_come_never_history(
    tracked: dict[str, Any],
) -> None:
    with session_scope() as session:  # the project's jobs before: one done, one running
        targets.set_tracking(
            session=session,
            project_name=tracked["name"],
            tracking_in=TrackingUpdate(tracking_uri=""),
            settings=get_settings(),
        )
    done, live = running_job(tracked), running_job(tracked)
    finish(done)

    def discover() -> set[int]:
        with session_scope() as session:
            found = targets.read_targets(session=session, settings=get_settings())
            targets.discover_jobs(session=session, targets=found, now=utcnow())
            return set(
                session.execute(
                    sa.select(MlflowRun.job_id).where(MlflowRun.job_id.in_(tracked["jobs"]))
                ).scalars()
            )

    assert discover() == set()  # not tracked: nothing
    with session_scope() as session:
        targets.set_tracking(
            session=session,
            project_name=tracked["name"],
            tracking_in=TrackingUpdate(tracking_uri="http://mlflow.example:5000"),
            settings=get_settings(),
        )
    assert discover() == {live}  # in flight: exported; finished before: not
    later = running_job(tracked)
    finish(later)  # even a job that ends between two rounds
    with session_scope() as session:
        queued = create_job(session, tracked["project_id"], name="waiting", replicas=1).id
        tracked["jobs"].append(queued)
    assert discover() == {live, later, queued}
    with session_scope() as session:
        uris = dict(session.execute(sa.select(MlflowRun.job_id, MlflowRun.tracking_uri)).all())
        # A page of the open runs holds none still queued: a queue longer than a page
        # never keeps the running jobs' runs out of a round.
        page = exports.read_open_runs(session=session, now=utcnow(), limit=2)
    assert uris[later] == "http://mlflow.example:5000"
    assert {open_run.job.id for open_run in page} == {live, later}


def test_a_run_mlflow_refuses_waits_alone_while_its_servers_other_runs_go_on(
    bus: redis.Redis, tracked: dict[str, Any], mlflow_server: MlflowServer
) -> None:
    from mlflow import MlflowClient

    exporter = Exporter(get_settings(), bus)
    exporter.run_round()
    gone, kept = running_job(tracked), running_job(tracked)
    exporter.run_round()  # both runs made
    MlflowClient(tracking_uri=mlflow_server.uri).delete_run(export_row(gone).run_id)
    report(bus, gone, range(1, 11))
    report(bus, kept, range(1, 11))
    done = exporter.run_round()
    assert (done.failed, done.points) == (1, 40)  # the refused run alone; the other's points
    row = export_row(gone)
    assert row.failures == 1 and row.retry_at is not None and "unreachable" not in row.error
    assert export_row(kept).failures == 0 and export_row(kept).points == 40
    assert any(e.startswith("MLflow export failing, retrying: ") for e in events(gone))
