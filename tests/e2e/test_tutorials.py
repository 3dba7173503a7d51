"""TensorFlow's two multi-worker tutorials (examples/tutorials) run as a new user runs them:
`cohort run --replicas 2 --code DIR -- python main.py` through the installed CLI, against
a whole stack, with real TensorFlow.

* The custom training loop, unchanged: it prints one line an epoch and writes nothing
  Cohort reads (no summary, no report, checkpoints in a temporary directory). The stack's
  start-up limit is 6 s and the run takes some 20 s on a quiet machine (34 s on a busy
  one), so it lasts at least twice past it: only its output, counted once the gang has
  formed, keeps it alive; TensorFlow's first lines come a second or two after the spawn,
  busy or not. (The limits are short so that the test takes a minute, not the default's
  three: the rule is the same.) `--follow` shows each replica's lines.
* The Keras `fit` tutorial with the two path changes examples/tutorials/README.md lists
  for checkpoints, a model and resuming: its chief is killed with SIGKILL once its first
  epoch is backed up, and the job succeeds on its second attempt, which starts at epoch 2,
  its model kept as an artifact.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cli.stack import Stack
from tests.e2e.conftest import job_story, pg_stack_with, wait_for, wait_terminal
from tests.faults.conftest import chief_checkpoints, saved_checkpoint
from tests.faults.processes import attempt_processes

pytestmark = [pytest.mark.slow(150), pytest.mark.timeout(900)]

TUTORIALS = Path(__file__).resolve().parents[2] / "examples" / "tutorials"
COHORT = str(Path(sys.executable).parent / "cohort")
# examples/tutorials/README.md, (b) and (c): the lines a user changes in keras_fit/main.py.
KERAS_CHANGES = (
    (
        'BackupAndRestore(backup_dir="/tmp/backup")',
        'BackupAndRestore(backup_dir=os.environ["COHORT_CHECKPOINT_DIR"])',
    ),
    ('model_path = "/tmp/keras-model"', 'model_path = os.environ["COHORT_MODEL_DIR"]'),
)


def cohort_run(stack: Stack, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """`cohort run ARGS` as a user types it, from an unrelated directory."""
    return subprocess.run(
        [COHORT, "run", "--url", stack.url, "--token", stack.token, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
        check=False,
    )


def test_the_custom_loop_tutorial_runs_unchanged_printing_only(tmp_path: Path) -> None:
    # The limit well under the tutorial's run: a 10 s limit left a quiet machine's
    # 19.5 s run short of twice past it. TensorFlow's first lines reach the log 1-2 s
    # after the spawn, busy machine or not, so 6 s still finds the gang alive.
    limits = {"COHORT_STARTUP_TIMEOUT": "6", "COHORT_PROGRESS_TIMEOUT": "120"}
    with pg_stack_with(tmp_path, limits) as (stack, client):
        done = cohort_run(
            stack,
            "--replicas=2",
            f"--code={TUTORIALS / 'custom_loop'}",
            "--follow",
            "--",
            "python",
            "main.py",
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        (job,) = client.jobs()["items"]
        assert job["status"] == "succeeded" and job["attempt"] == 1, job_story(client, job["id"])
        for replica in (0, 1):
            for epoch in (0, 1, 2):
                assert f"[r{replica}] Epoch: {epoch}, accuracy:" in done.stdout, done.stdout[-3000:]
        events = {e["to_status"]: e["created_at"] for e in client.events(job["id"])}
        ran = _seconds(events["succeeded"]) - _seconds(events["running"])
        # Past the start-up limit several times over, with no training step ever seen.
        assert ran > 2 * stack.settings.STARTUP_TIMEOUT, (ran, events)
        assert client.metrics(job["id"]) == []


def test_the_keras_tutorial_resumes_after_its_chief_is_killed(tmp_path: Path) -> None:
    code = tmp_path / "keras_fit"
    shutil.copytree(TUTORIALS / "keras_fit", code)
    main = code / "main.py"
    text = main.read_text()
    for old, new in KERAS_CHANGES:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    main.write_text(text)
    fast = {"COHORT_RESTART_BACKOFF": "1", "COHORT_STOP_GRACE": "5"}
    with pg_stack_with(tmp_path, fast) as (stack, client):
        submitted = cohort_run(
            stack,
            f"--code={code}",
            "--set=restart_policy=on_failure",
            "--set=max_restarts=2",
            "--json",
            "--",
            "python",
            "main.py",
            timeout=120,
        )
        assert submitted.returncode == 0, submitted.stderr
        job_id = json.loads(submitted.stdout)["id"]
        wait_for(
            lambda: saved_checkpoint(chief_checkpoints(stack, job_id)),
            300,
            f"job {job_id}'s first backup",
            interval=0.2,
            explain=lambda: job_story(client, job_id),
        )
        chief = [
            p
            for p in attempt_processes(stack, job_id, 1)
            if p.environ().get("COHORT_REPLICA_INDEX") == "0"
            and "main.py" in p.cmdline()
            and "workers.node.guard" not in p.cmdline()  # the script, not its guard
        ]
        assert len(chief) == 1, chief
        os.kill(chief[0].pid, signal.SIGKILL)
        final = wait_terminal(client, job_id, timeout=600)
        assert final["status"] == "succeeded", job_story(client, job_id)
        assert final["attempt"] == 2, job_story(client, job_id)
        resumed = "\n".join(
            line["line"] for line in client.logs(job_id, attempt=2, replica=0, limit=10_000)
        )
        # BackupAndRestore put the second attempt at the epoch after the one backed up.
        assert "Epoch 1/3" not in resumed and "Epoch 3/3" in resumed, resumed[-2000:]
        listed = {a["path"] for a in client.artifacts(job_id)}
        assert "model/saved_model.pb" in listed, sorted(listed)[:40]


def _seconds(at: str) -> float:
    return dt.datetime.fromisoformat(at).timestamp()
