"""End to end: a user's own script, run as a 2-replica `command` job, seen from the
installed `cohort` CLI: its output live under --follow (each line after its replica,
once, a Keras-style progress bar at its last state), progress only as it reported it,
and a job that reported no metrics told how to report them.

No TensorFlow: the script is a few lines of Python, so each job costs a Python start.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli.stack import Stack
from cohort.client import Client

COHORT = [str(Path(sys.executable).parent / "cohort")]  # the installed console script

# Reports 40 steps (cohort.report), prints a line every 10, then a progress bar drawn the
# way tf_keras' Progbar draws it into a file: backspaces and carriage returns.
TALKER = """\
import os, sys, time
from cohort.metrics import report
index = os.environ["COHORT_REPLICA_INDEX"]
print(f"hello from replica {index}", flush=True)
for step in range(1, 41):
    time.sleep(0.02)
    report(step, loss=1.0 / step)
    if step % 10 == 0:
        print(f"step {step} of 40 [{index}]", flush=True)
sys.stdout.write("\\r1/3 [=>...]" + "\\b" * 11 + "\\r3/3 [=====] - loss: 0.25\\n")
print(f"bye from replica {index}", flush=True)
"""
SILENT = "print('training my own way, reporting nothing', flush=True)"


def cohort(stack: Stack, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COHORT_URL": stack.url, "COHORT_TOKEN": stack.token, "COLUMNS": "200"}
    return subprocess.run(
        [*COHORT, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def spec_file(tmp_path: Path, name: str, script: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "command": ["python", "-c", script],
                "strategy": "multi_worker_mirrored",
                "replicas": 2,
            }
        )
    )
    return path


@pytest.mark.e2e
def test_submit_follow_shows_each_replicas_output_once_and_only_reported_progress(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = module_stack
    done = cohort(stack, "job", "submit", str(spec_file(tmp_path, "talker", TALKER)), "--follow")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    job_id = int(re.search(r"submitted job (\d+)", out).group(1))
    for index in (0, 1):
        printed = [
            f"[r{index}] hello from replica {index}",
            *(f"[r{index}] step {s} of 40 [{index}]" for s in (10, 20, 30, 40)),
            f"[r{index}] 3/3 [=====] - loss: 0.25",  # the bar's last state, no \r or \b
            f"[r{index}] bye from replica {index}",
        ]
        shown = [line for line in out.splitlines() if line.startswith(f"[r{index}] ")]
        assert shown == printed, out  # every line once, in order
    assert "\b" not in out and "\r" not in out
    # The status changes, the last after every line; progress as the script reported it.
    assert f"job {job_id} running" in out
    assert out.index(f"job {job_id} succeeded") > out.index("[r1] bye from replica 1"), out
    assert "replica 0 step 40 loss 0.0250" in out, out
    assert "/100" not in out and "epoch 5" not in out, out  # no made-up length
    assert f"job {job_id} succeeded: last loss 0.0250 at step 40" in out

    shown = cohort(stack, "job", "show", str(job_id))
    assert f"job {job_id} talker: succeeded (attempt 1) step 40" in shown.stdout, shown.stdout
    job = client.job(job_id)
    assert job["hyperparameters"] == {}  # no built-in trainer's defaults
    assert job["progress"]["step"] == 40 and job["progress"]["total_steps"] is None


@pytest.mark.e2e
def test_a_job_that_reports_no_metrics_is_told_how_and_json_stays_json(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, _client = module_stack
    spec = spec_file(tmp_path, "silent", SILENT)
    done = cohort(stack, "job", "submit", str(spec), "--follow", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    job = json.loads(done.stdout)  # stdout: the final job alone; the rest went to stderr
    assert job["status"] == "succeeded"
    assert "[r0] training my own way, reporting nothing" in done.stderr
    assert "[r1] training my own way, reporting nothing" in done.stderr
    hint = (
        f"job {job['id']} reported no metrics: write TensorBoard scalars under "
        "$COHORT_TENSORBOARD_DIR or call cohort.report()"
    )
    metrics = cohort(stack, "job", "metrics", str(job["id"]))
    assert metrics.returncode == 0 and hint in metrics.stderr, metrics.stderr

    # Following it again: the summary does not pretend, and --no-logs hides the output.
    again = cohort(stack, "job", "show", str(job["id"]), "--follow", "--no-logs")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "[r0]" not in again.stdout and hint in again.stdout, again.stdout
    logs = cohort(stack, "job", "logs", str(job["id"]), "-f")
    assert logs.stdout.count("training my own way") == 2, logs.stdout
    assert f"job {job['id']} succeeded" in logs.stderr, logs.stderr
