"""Exact resume and "checkpoint now", for real: runner processes of the built-in
`mlp_digits` (through tests/workers/resume_trainer.py), one_device and a 2-worker
MultiWorkerMirroredStrategy gang on loopback ports.

A replica killed with SIGKILL at a step chosen at random (the seed is printed), then
resumed as attempt 2 from its step-level backup, ends with the weights and optimizer
state of an uninterrupted run with the same seed (max abs difference <= 1e-6). SIGUSR1
to ONE worker of a gang makes both save at the same step and exit 75 (to a one_device
replica, at its next step); attempt 2 starts at the step after it (none redone) and ends
as the uninterrupted run does.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services import exit_codes
from tests.workers import test_runner_local as local
from tests.workers.test_runner_local import (
    Reports,
    gang_envs,
    logs_of,
    replica_env,
    run_replicas,
    spec,
    start_replicas,
    wait_replicas,
)
from workers.replica.backups import DECISION_STEPS

reports = local.reports
spec_dir = local.spec_dir

TRAINER = "tests.workers.resume_trainer:train"
EPOCHS, STEPS_PER_EPOCH = 3, 40
TOTAL = EPOCHS * STEPS_PER_EPOCH
TRAINING: dict[str, Any] = {
    "epochs": EPOCHS,
    "steps_per_epoch": STEPS_PER_EPOCH,
    "hidden_units": 32,
    "seed": 7,
}
EVERY = 9  # steps between backups when a replica is killed (and each epoch end, 40)
TOLERANCE = 1e-6
# A run's limit: TensorFlow's start alone took 80 s on a loaded 2-core machine.
RUN_TIMEOUT = 400.0

# Every variable of the saved model but the metrics' (reset each epoch, so a resumed
# epoch's counts differ) and the save counter: the weights and the optimizer's state.
READER = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    def variables(model_dir):
        reader = tf.train.load_checkpoint(model_dir + "/variables/variables")
        return {
            name: reader.get_tensor(name)
            for name in reader.get_variable_to_shape_map()
            if name.endswith("VARIABLE_VALUE") and "metrics" not in name
            and "save_counter" not in name
        }
    a, b = variables(sys.argv[1]), variables(sys.argv[2])
    assert a.keys() == b.keys() and a, (sorted(a), sorted(b))
    diffs = {n: float(abs(a[n].astype("float64") - b[n].astype("float64")).max()) for n in a}
    print(json.dumps({"count": len(a), "max": max(diffs.values()), "diffs": diffs}))
""")


def max_difference(first: Path, second: Path) -> float:
    """The largest absolute difference between two saved models' variables."""
    out = subprocess.run(
        [sys.executable, "-c", READER, str(first / "model"), str(second / "model")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["count"] >= 8, figures  # 3 kernels, 3 biases, Adam's slots, iterations
    return float(figures["max"])


def chosen_step(low: int, high: int) -> int:
    """A step in [low, high], from a seed printed for a rerun (COHORT_RESUME_SEED)."""
    seed = int(os.environ.get("COHORT_RESUME_SEED") or time.time_ns() % 2**31)
    step = random.Random(seed).randint(low, high)
    print(f"COHORT_RESUME_SEED={seed}: step {step}")  # noqa: T201 - shown on failure
    return step


def envs(
    job_id: int, job_dir: Path, hp: dict[str, Any], *, attempt: int = 1, replicas: int = 1
) -> list[dict[str, str]]:
    """The replicas' environments: one_device, or a multi_worker_mirrored gang."""
    if replicas == 1:
        return [
            replica_env(spec(job_id, job_dir, attempt=attempt, trainer=TRAINER, hyperparameters=hp))
        ]
    return gang_envs(
        job_id, job_dir, replicas, attempt=attempt, trainer=TRAINER, hyperparameters=hp
    )


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, Path]]:
    """The job directories of uninterrupted runs, one_device and a 2-worker gang, by
    replica count (run once for the module's tests)."""
    root = tmp_path_factory.mktemp("uninterrupted")
    local._spec_dir.append(root)
    try:
        dirs = {}
        for job_id, replicas in ((1, 1), (2, 2)):
            job_dir = root / f"job-{replicas}"
            logs = root / f"logs-{replicas}"
            codes = run_replicas(
                envs(job_id, job_dir, TRAINING, replicas=replicas), logs, RUN_TIMEOUT
            )
            assert codes == [0] * replicas, logs_of(logs)
            dirs[replicas] = job_dir
        yield dirs
    finally:
        local._spec_dir.remove(root)


def last_backup_before(step: int) -> int:
    """The step of the last backup taken before step `step`'s own (which the kill at
    its end comes before): every EVERY steps, and at each epoch's end (resetting the count)."""
    last = count = 0
    for done in range(1, step):
        count += 1
        if count == EVERY or done % STEPS_PER_EPOCH == 0:
            last, count = done, 0
    return last


def first_steps(reports: Reports, job_id: int, attempt: int) -> int:
    """The first step attempt `attempt` of the job reported (its replica 0's loss)."""
    return min(
        step
        for got, replica, step, _, name, *_ in reports.points(job_id)
        if got == attempt and replica == 0 and name == "loss"
    )


@pytest.mark.parametrize("replicas", [1, 2], ids=["one_device", "multi_worker_mirrored"])
def test_a_replica_killed_at_a_random_step_resumes_to_the_same_weights(
    replicas: int, uninterrupted: dict[int, Path], reports: Reports, tmp_path: Path
) -> None:
    kill_at = chosen_step(2, TOTAL - 2)
    victim = random.Random(kill_at).randrange(replicas)
    job_dir, job_id = tmp_path / "job", 10 + replicas
    hp = {**TRAINING, "checkpoint_every_steps": EVERY}
    first = envs(
        job_id, job_dir, {**hp, "kill_at_step": kill_at, "kill_replica": victim}, replicas=replicas
    )
    processes = start_replicas(first, tmp_path / "logs-1")
    assert processes[victim].wait(timeout=RUN_TIMEOUT) == -signal.SIGKILL, logs_of(
        tmp_path / "logs-1"
    )
    for process in processes:  # as the agent tears the rest of the gang down
        process.kill()
        process.wait()

    second = envs(job_id, job_dir, hp, attempt=2, replicas=replicas)
    assert run_replicas(second, tmp_path / "logs-2", RUN_TIMEOUT) == [0] * replicas, logs_of(
        tmp_path / "logs-2"
    )
    # The backup attempt 2 resumed after: the last one before the kill step's. But where a
    # backup was due at the kill step itself, a gang's chief that is not the victim takes
    # it (its save waits for no peer: the step's gradients were all-reduced already) unless
    # the teardown kills it first, and resuming after that backup is as exact (seed
    # 792964444: killed at 116, resumed after 116, not 107).
    backups = {last_backup_before(kill_at)}
    if replicas > 1 and victim != 0 and last_backup_before(kill_at + 1) == kill_at:
        backups.add(kill_at)
    backup = first_steps(reports, job_id, 2) - 1
    assert backup in backups, (backup, backups)
    out = (tmp_path / "logs-2" / "replica-0.out").read_text()
    assert (f"resuming after step {backup}" in out) == (backup > 0), out
    assert max_difference(job_dir, uninterrupted[replicas]) <= TOLERANCE


def test_sigusr1_to_one_worker_checkpoints_the_gang_at_one_step(
    uninterrupted: dict[int, Path], reports: Reports, tmp_path: Path
) -> None:
    job_dir, job_id = tmp_path / "job", 20
    # No periodic backup within the run: the one taken on request is all there is.
    hp = {**TRAINING, "checkpoint_every_steps": 10 * TOTAL, "step_sleep": 0.02}
    logs = tmp_path / "logs-1"
    processes = start_replicas(envs(job_id, job_dir, hp, replicas=2), logs)
    out = logs / "replica-1.out"
    deadline = time.monotonic() + RUN_TIMEOUT
    while "first_step" not in (out.read_text() if out.exists() else ""):
        assert time.monotonic() < deadline and processes[1].poll() is None, logs_of(logs)
        time.sleep(0.05)
    time.sleep(chosen_step(0, 100) / 100)  # 0-1 s into a run of >= 2.4 s
    processes[1].send_signal(signal.SIGUSR1)
    codes = wait_replicas(processes, logs, RUN_TIMEOUT)
    assert codes == [exit_codes.CHECKPOINTED] * 2, logs_of(logs)
    steps = {
        int(m.group(1))
        for index in (0, 1)
        for m in re.finditer(
            r"checkpointed step=(\d+)", (logs / f"replica-{index}.out").read_text()
        )
    }
    assert len(steps) == 1, logs_of(logs)  # the same step on both workers, once each
    (saved,) = steps
    assert 0 < saved < TOTAL and saved % DECISION_STEPS == 0, saved  # a decision step

    second = envs(job_id, job_dir, {**hp, "step_sleep": 0}, attempt=2, replicas=2)
    assert run_replicas(second, tmp_path / "logs-2", RUN_TIMEOUT) == [0, 0], logs_of(
        tmp_path / "logs-2"
    )
    assert first_steps(reports, job_id, 2) == saved + 1  # no step redone
    assert max_difference(job_dir, uninterrupted[2]) <= TOLERANCE


def test_sigusr1_to_a_one_device_replica_checkpoints_at_the_next_step(
    uninterrupted: dict[int, Path], reports: Reports, tmp_path: Path
) -> None:
    job_dir, job_id = tmp_path / "job", 21
    hp = {**TRAINING, "checkpoint_every_steps": 10 * TOTAL, "step_sleep": 0.02}
    logs = tmp_path / "logs-1"
    (process,) = start_replicas(envs(job_id, job_dir, hp), logs)
    out = logs / "replica-0.out"
    deadline = time.monotonic() + RUN_TIMEOUT
    while "first_step" not in (out.read_text() if out.exists() else ""):
        assert time.monotonic() < deadline and process.poll() is None, logs_of(logs)
        time.sleep(0.05)
    time.sleep(chosen_step(0, 100) / 100)
    process.send_signal(signal.SIGUSR1)
    assert wait_replicas([process], logs, RUN_TIMEOUT) == [exit_codes.CHECKPOINTED], logs_of(logs)
    (saved,) = (int(m) for m in re.findall(r"checkpointed step=(\d+)", out.read_text()))
    assert 0 < saved < TOTAL, saved  # no collective: the first step boundary after the signal

    second = envs(job_id, job_dir, {**hp, "step_sleep": 0}, attempt=2)
    assert run_replicas(second, tmp_path / "logs-2", RUN_TIMEOUT) == [0], logs_of(
        tmp_path / "logs-2"
    )
    assert first_steps(reports, job_id, 2) == saved + 1
    assert max_difference(job_dir, uninterrupted[1]) <= TOLERANCE
