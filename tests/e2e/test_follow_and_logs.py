"""End to end: `cohort job submit --follow` of a real 2-replica job, then its logs and metrics.

The CLI follows the job over SSE and exits with the job's outcome; the replicas' logs,
shipped by the agent through Redis, match the files the replicas wrote and outlive them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli.stack import Stack
from cohort.client import Client
from tests.e2e.conftest import wait_for

COHORT = [sys.executable, "-m", "cli"]


def cohort(stack: Stack, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COHORT_URL": stack.url, "COHORT_TOKEN": stack.token, "COLUMNS": "200"}
    return subprocess.run(
        [*COHORT, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.e2e
def test_submit_follow_then_logs(pg_stack: tuple[Stack, Client], tmp_path: Path) -> None:
    stack, client = pg_stack
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: follow-me\ntrainer: mlp_digits\nstrategy: multi_worker_mirrored\n"
        "replicas: 2\nhyperparameters: {epochs: 3, steps_per_epoch: 20}\n"
    )
    done = cohort(stack, "submit", str(spec), "--follow")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    job_id = int(re.search(r"submitted job (\d+)", out).group(1))
    # Progress per replica, with live loss and accuracy, up to the last step.
    for replica in (0, 1):
        assert re.search(
            rf"replica {replica} epoch \d/3 step \d+/60 loss \d\.\d{{4}} "
            rf"acc \d\.\d{{3}}",
            out,
        ), out
        assert f"replica {replica} epoch 3/3 step 60/60" in out, out
    assert f"job {job_id} succeeded" in out
    # The outcome is the last word, after the final progress.
    assert out.index(f"job {job_id} succeeded") > max(
        out.index(f"replica {r} epoch 3/3 step 60/60") for r in (0, 1)
    ), out

    job = client.job(job_id)
    assert job["progress"]["percent"] == 100.0 and job["progress"]["step"] == 60

    # The log tail the API serves is what each replica printed into its file.
    log_dir = stack.settings.data_dir / "jobs" / str(job_id) / "logs" / "attempt-1"
    printed = {i: (log_dir / f"replica-{i}.log").read_text().splitlines() for i in (0, 1)}
    assert any(line.startswith("cohort: replica ") for line in printed[0])
    for i in (0, 1):
        wait_for(
            lambda i=i: len(client.logs(job_id, replica=i, limit=100_000)) == len(printed[i]),
            30,
            f"replica {i}'s logs to be stored",
        )
        tail = client.logs(job_id, replica=i, attempt=1, tail=15)
        assert [item["line"] for item in tail] == printed[i][-15:]
        assert [item["line"] for item in client.logs(job_id, replica=i, limit=100_000)] == printed[
            i
        ]

    # They outlive the job's files, and the CLI prints them for scripts.
    shutil.rmtree(stack.settings.data_dir / "jobs" / str(job_id))
    listed = cohort(stack, "logs", str(job_id), "--replica", "1", "--tail", "5", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["line"] for line in listed.stdout.splitlines()] == printed[1][-5:]

    # Resource figures travelled with the training metrics.
    names = {p["name"] for p in client.metrics(job_id, replica=0, limit=100_000)}
    assert {"loss", "accuracy", "step_time", "cpu_percent", "memory_mb"} <= names
    table = cohort(stack, "metrics", str(job_id), "--name", "loss", "--max-points", "10")
    assert table.returncode == 0 and "loss" in table.stdout
    got = json.loads(cohort(stack, "get", str(job_id), "--json").stdout)
    assert got["status"] == "succeeded"
