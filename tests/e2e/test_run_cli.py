"""End to end: `cohort run --replicas 2 -- python script.py ARGS`, typed in the directory
that holds the script, runs it as a 2-replica job to success (a real api, scheduler and
agent; the script is the stepper's, no TensorFlow: seconds)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli.stack import Stack
from cohort.client import Client
from tests.e2e.stepper import SCRIPT


@pytest.mark.e2e
def test_run_a_script_from_its_directory(pg_stack: tuple[Stack, Client], tmp_path: Path) -> None:
    stack, client = pg_stack
    here = tmp_path / "project"
    here.mkdir()
    (here / "script.py").write_text(SCRIPT)
    env = {**os.environ, "COHORT_URL": stack.url, "COHORT_TOKEN": stack.token, "COLUMNS": "200"}
    argv = ["run", "--replicas", "2", "--set", "hyperparameters.learning_rate=0.25", "--follow"]
    done = subprocess.run(
        [sys.executable, "-m", "cli", *argv, "--", "python", "script.py", "30", "0.01"],
        cwd=here,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "script.py is in the current directory" in done.stdout
    job_id = int(re.search(r"submitted job (\d+)", done.stdout).group(1))
    assert f"job {job_id} succeeded" in done.stdout
    job = client.job(job_id)
    assert (job["name"], job["replicas"]) == ("script", 2)
    assert job["command"] == ["python", "script.py", "30", "0.01"]
    assert job["bundle"] and job["hyperparameters"]["learning_rate"] == 0.25
    assert [r["exit_code"] for r in job["replica_list"]] == [0, 0]
    # The script's own reports, learning at the rate --set gave it.
    accuracy = client.metrics(job_id, replica=0, name=["accuracy"])
    assert accuracy[-1]["step"] == 30 and accuracy[-1]["value"] == 1.0
