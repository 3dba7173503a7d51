"""End to end: schedules fired by new data and what a scheduled run is told, on the real stack
(PostgreSQL, Redis, api, scheduler, agent) with TensorFlow replicas and the installed CLI.

The data-triggered runs train a one-layer Keras model on the pushed CSV and print the
variables their fire gave them; the two-scheduler test fires jobs that wait in the queue
(a GPU job on a CPU node), since there firing is what is tested, not TensorFlow.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.stack import Stack
from cohort.client import Client
from tests.e2e.conftest import wait_for, wait_terminal
from tests.e2e.test_schedules import TINY, _leader, api, parse, scheduled_jobs

pytestmark = [pytest.mark.e2e, pytest.mark.slow(120)]

COHORT = [str(Path(sys.executable).parent / "cohort")]  # the installed console script
NAMES = (
    "COHORT_SCHEDULED_FOR",
    "COHORT_DATA_VERSION",
    "COHORT_DATA_INTERVAL_START",
    "COHORT_DATA_INTERVAL_END",
)
# Trains on the pushed data, then prints what its fire told it.
TRAIN = f"""\
import os, numpy as np, tensorflow as tf
rows = np.loadtxt(os.path.join(os.environ["COHORT_INPUT_DIR"], "train.csv"), delimiter=",", ndmin=2)
model = tf.keras.Sequential([tf.keras.Input((rows.shape[1] - 1,)), tf.keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(rows[:, :-1], rows[:, -1], epochs=1, verbose=0)
for name in {NAMES!r}:
    print(f"{{name}}={{os.environ.get(name, '')}}", flush=True)
"""
SETTLE = 6
JOB = {
    "command": ["python", "-c", TRAIN],
    "strategy": "one_device",
    "replicas": 1,
    "inputs": {"train.csv": "data/retrain/train.csv"},
}


def cohort(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COHORT_URL": stack.url, "COHORT_TOKEN": stack.token, "COLUMNS": "200"}
    return subprocess.run(
        [*COHORT, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def push(stack: Stack, tmp_path: Path, path: str, body: str) -> float:
    """`cohort data push`; returns when the upload was answered (time.time())."""
    local = tmp_path / path.replace("/", "_")
    local.write_text(body)
    done = cohort(stack, "data", "push", str(local), path)
    assert done.returncode == 0, done.stdout + done.stderr
    return time.time()


def printed(client: Client, job_id: int) -> dict[str, str]:
    lines = [line.line for line in client.logs(job_id)]
    return dict(line.split("=", 1) for line in lines if line.startswith(NAMES))


def fired_runs(client: Client, schedule_id: int) -> list[dict[str, Any]]:
    runs = api(client, "GET", f"/{schedule_id}", params={"runs": 100})["recent_runs"]
    return [r for r in runs if r["job_id"] is not None][::-1]  # oldest first


def test_each_pushed_content_starts_one_run_that_knows_its_version(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = module_stack
    push(stack, tmp_path, "retrain/train.csv", "0,1\n1,3\n")
    spec = tmp_path / "schedule.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "on-new-data",
                "trigger": {"data": "data/retrain", "settle_seconds": SETTLE},
                "job": JOB,
            }
        )
    )
    created = cohort(stack, "schedules", "create", str(spec), "--json")
    assert created.returncode == 0, created.stdout + created.stderr
    schedule = next(s for s in api(client, "GET", "")["items"] if s["name"] == "on-new-data")
    sid, baseline = schedule["id"], schedule["data_version"]
    assert baseline is not None  # the content there at creation is handled: no run for it

    def runs_made(count: int) -> list[dict[str, Any]]:
        return wait_for(
            lambda: r if len(r := fired_runs(client, sid)) >= count else None,
            SETTLE + 60,
            f"{count} run(s) of the schedule",
            interval=0.2,
        )

    answered = push(stack, tmp_path, "retrain/train.csv", "0,1\n1,2\n2,3\n")
    [first] = runs_made(1)
    push(stack, tmp_path, "retrain/train.csv", "0,2\n1,4\n2,6\n")
    second = runs_made(2)[1]
    # The same content again: a change that settles to nothing new.
    push(stack, tmp_path, "retrain/train.csv", "0,2\n1,4\n2,6\n")
    time.sleep(SETTLE + 3)
    assert len(fired_runs(client, sid)) == 2
    # Several files within settle_seconds: one run, for all of them. Uploaded through the
    # Python client: three CLI starts took longer than settle_seconds on a loaded machine.
    started = time.monotonic()
    for name, body in (("train.csv", "0,3\n1,6\n"), ("notes.txt", "x\n"), ("labels.csv", "0\n")):
        (local := tmp_path / f"several_{name}").write_text(body)
        client.upload_data(f"retrain/{name}", local)
    assert time.monotonic() - started < SETTLE, "the pushes took longer than settle_seconds"
    third = runs_made(3)[2]
    time.sleep(SETTLE + 3)
    assert len(fired_runs(client, sid)) == 3

    shown = cohort(stack, "schedules", "show", str(sid))
    assert shown.returncode == 0 and "on new data/retrain" in shown.stdout, shown.stdout
    assert third["data_version"][:19] in shown.stdout
    versions = [baseline, first["data_version"], second["data_version"], third["data_version"]]
    assert len(set(versions)) == 4
    for run in (first, second, third):
        job = wait_terminal(client, run["job_id"], timeout=300)
        assert job["status"] == "succeeded", job
        told = printed(client, run["job_id"])
        assert told["COHORT_DATA_VERSION"] == run["data_version"]
        assert run["data_version"] in run["reason"]
        assert parse(told["COHORT_SCHEDULED_FOR"]) == parse(run["scheduled_for"])
        assert parse(told["COHORT_DATA_INTERVAL_END"]) <= parse(run["scheduled_for"])
    # Each run's interval of changes starts where the one before ended.
    assert (
        printed(client, second["job_id"])["COHORT_DATA_INTERVAL_START"]
        == (printed(client, first["job_id"])["COHORT_DATA_INTERVAL_END"])
    )
    created_at = parse(client.request("GET", f"/api/v1/jobs/{first['job_id']}")["created_at"])
    # Debounced: not before the push settled, and soon after (a pass a second).
    assert SETTLE - 1 <= created_at.timestamp() - answered < SETTLE + 10
    api(client, "POST", f"/{sid}/pause")


def test_an_interval_run_sees_its_data_interval_and_env_cannot_pose_as_it(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = module_stack
    spoof = tmp_path / "spoof.yaml"
    spoof.write_text(
        "name: spoof\ninterval_seconds: 5\njob:\n  command: [python, -c, pass]\n"
        "  env: {COHORT_DATA_INTERVAL_START: '2000-01-01T00:00:00Z'}\n"
    )
    refused = cohort(stack, "schedules", "create", str(spoof))
    assert refused.returncode != 0 and "reserved" in refused.stdout + refused.stderr
    push(stack, tmp_path, "retrain/train.csv", "0,1\n1,3\n")
    schedule = api(client, "POST", "", json={"name": "every5", "interval_seconds": 5, "job": JOB})
    sid, created = schedule["id"], parse(schedule["created_at"])
    jobs = wait_for(
        lambda: j if len(j := scheduled_jobs(client, sid)) >= 2 else None, 60, "two fires"
    )
    api(client, "POST", f"/{sid}/pause")
    first, second = (wait_terminal(client, j["id"], timeout=300) for j in jobs[:2])
    assert first["status"] == second["status"] == "succeeded"
    one, two = printed(client, first["id"]), printed(client, second["id"])
    assert parse(one["COHORT_DATA_INTERVAL_START"]) == created  # the first: from creation
    assert parse(one["COHORT_DATA_INTERVAL_END"]) == parse(first["scheduled_for"])
    assert one["COHORT_SCHEDULED_FOR"] == one["COHORT_DATA_INTERVAL_END"]
    assert two["COHORT_DATA_INTERVAL_START"] == one["COHORT_DATA_INTERVAL_END"]
    assert parse(two["COHORT_DATA_INTERVAL_END"]) - parse(
        one["COHORT_DATA_INTERVAL_END"]
    ) == dt.timedelta(seconds=5)
    assert one["COHORT_DATA_VERSION"] == ""  # a timed run is for no data version
    for rest in scheduled_jobs(client, sid):
        if rest["status"] not in ("succeeded", "failed", "cancelled"):
            client.cancel(rest["id"])


def test_two_schedulers_fire_each_data_version_once(
    pg_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = pg_stack
    stack._spawn("scheduler-2", [sys.executable, "-m", "cli", "scheduler"])
    waiting = {**TINY, "gpus_per_replica": 1}  # queued on a CPU node: no TensorFlow
    schedule = api(
        client,
        "POST",
        "",
        json={"name": "race", "job": waiting, "trigger": {"data": "data/d", "settle_seconds": 1}},
    )
    sid = schedule["id"]
    local = tmp_path / "x.csv"

    def new_version(n: int) -> None:
        local.write_text(f"version {n}\n")
        client.upload_data("d/x.csv", local)
        wait_for(lambda: len(scheduled_jobs(client, sid)) >= n, 60, f"version {n}'s run")

    for n in (1, 2, 3):
        new_version(n)
    name, leader = _leader(stack)
    os.killpg(leader.pid, signal.SIGKILL)  # the other takes over after the lock's TTL
    for n in (4, 5, 6):
        new_version(n)
    time.sleep(3)
    runs = api(client, "GET", f"/{sid}", params={"runs": 100})["recent_runs"]
    versions = [r["data_version"] for r in runs]
    assert len(versions) == len(set(versions)) == 6, (name, runs)
    assert sorted(r["job_id"] for r in runs) == sorted(j["id"] for j in scheduled_jobs(client, sid))
    for job in scheduled_jobs(client, sid):
        client.cancel(job["id"])
