"""Metrics and progress of a script that imports nothing but tf.summary and cohort.report,
followed by the agent's ScalarShipper while it runs: real TensorFlow, Redis, PostgreSQL."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa

from services.telemetry.metrics import parse_batch
from services.wire.batches import ProgressBeat
from services.wire.keys import METRICS_STREAM, PROGRESS_HASH, progress_field
from tests.e2e.conftest import wait_for
from tests.streams.conftest import ingest_until
from tests.tfsummaries import expected_reports, expected_scalars, start_writer
from workers.node.report_shipper import MetricReporter
from workers.node.scalars import ScalarShipper

STEPS = 8


def shipper_for(bus: redis.Redis, job_id: int, tmp_path: Path, **kwargs: Any) -> ScalarShipper:
    reporter = MetricReporter.from_url(
        os.environ["COHORT_REDIS_URL"], job_id=job_id, attempt=1, replica=1
    )
    return ScalarShipper(
        reporter,
        bus,
        job_id=job_id,
        attempt=1,
        index=1,
        metrics_file=tmp_path / "metrics.jsonl",
        tensorboard_dir=tmp_path / "tensorboard",
        **kwargs,
    )


def beat_of(bus: redis.Redis, job_id: int) -> float | None:
    return None if (beat := read_beat(bus, job_id)) is None else beat.until


def read_beat(bus: redis.Redis, job_id: int) -> ProgressBeat | None:
    field = progress_field(job_id, 1, 1)
    value = bus.hget(PROGRESS_HASH, field)
    return None if value is None else ProgressBeat.decode(field, value)


def test_a_running_scripts_scalars_reach_the_stream_and_sql_with_progress_beats(
    bus: redis.Redis, committed: Any, tmp_path: Path
) -> None:
    from services.db import session_scope
    from services.models import MetricPoint

    _, job_id = committed()
    shipper = shipper_for(bus, job_id, tmp_path, poll_seconds=0.2)
    shipper.start()
    script = start_writer(
        tmp_path / "tensorboard", STEPS, pause=0.4, metrics_file=tmp_path / "metrics.jsonl"
    )
    # Beats come while the script runs, from its files alone.
    wait_for(lambda: beat_of(bus, job_id) is not None, 60, "a progress beat")
    first_beat = beat_of(bus, job_id)
    assert script.wait(120) == 0, script.stderr.read() if script.stderr else ""
    shipper.finish()
    assert beat_of(bus, job_id) > first_beat  # later progress, later beats

    rows = [row for _, fields in bus.xrange(METRICS_STREAM) for row in parse_batch(fields["data"])]
    expected = expected_scalars(STEPS) | expected_reports(STEPS)
    assert {(r["step"], r["name"], r["value"]) for r in rows} == expected
    assert {(r["job_id"], r["attempt"], r["replica"], r["epoch"]) for r in rows} == {
        (job_id, 1, 1, None)
    }
    assert ingest_until(bus, len(expected)) == len(expected)
    with session_scope() as session:
        stored = session.execute(
            sa.select(MetricPoint.step, MetricPoint.name).where(MetricPoint.job_id == job_id)
        ).all()
    assert {(step, name) for step, name in stored} == {(s, n) for s, n, _ in expected}


def test_an_agent_beat_never_shortens_one_the_replica_dated_ahead(
    bus: redis.Redis, committed: Any, tmp_path: Path
) -> None:
    _, job_id = committed()
    shipper = shipper_for(bus, job_id, tmp_path)
    saving_until = time.time() + 300  # the Keras callback's FINISH_GRACE while saving
    bus.hset(PROGRESS_HASH, *ProgressBeat(job_id, 1, 1, saving_until, 300.0).encode())
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "metrics": {"a": 1}}) + "\n")
    shipper.step()
    assert shipper.follower.last_progress is not None
    assert beat_of(bus, job_id) == saving_until
    bus.hset(PROGRESS_HASH, progress_field(job_id, 1, 1), "not a time")
    with open(tmp_path / "metrics.jsonl", "a") as handle:
        handle.write(json.dumps({"step": 2, "metrics": {"a": 2}}) + "\n")
    time.sleep(1.0)  # one beat a second at most
    shipper.step()
    assert beat_of(bus, job_id) == shipper.follower.last_progress


def test_a_beat_dated_ahead_says_how_far_ahead_as_a_duration(
    bus: redis.Redis, committed: Any, tmp_path: Path
) -> None:
    # The control plane times a beat by its own clock when it sees it; the replica's
    # "alive while I save" crosses as seconds, which mean the same on every clock.
    _, job_id = committed()
    shipper = shipper_for(bus, job_id, tmp_path)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"beat": time.time() + 300}) + "\n")
    shipper.step()
    beat = read_beat(bus, job_id)
    assert beat is not None and 295 < beat.ahead <= 300
