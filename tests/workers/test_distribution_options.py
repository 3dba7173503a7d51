"""The `distribution:` options and `profile:` in real replica processes (no control plane).

Runner processes are spawned from spec files as the agent would (see
test_runner_local.py): gradient accumulation, the shard policy and mixed precision in
the built-in trainers, a profile of a step range, the model-parallel example on two
logical devices, and `cnn_digits` under one_device and a 2-replica gang. The
accumulation equivalence runs in tests/workers/distribution_probe.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.replica_runs import ROOT
from tests.workers.test_runner_local import (  # noqa: F401 - fixtures used by name
    Reports,
    gang_envs,
    logs_of,
    read_points,
    replica_env,
    reports,
    run_replicas,
    spec,
    spec_dir,
)

SHORT = {"epochs": 1, "steps_per_epoch": 8}


def finals(reports: Reports, job_id: int) -> dict[int, dict[str, float]]:  # noqa: F811
    """Each replica's final (eval_*) metrics."""
    out: dict[int, dict[str, float]] = {}
    for replica, _, _, name, value, _ in read_points(reports, job_id):
        if name.startswith("eval_"):
            out.setdefault(replica, {})[name] = value
    return out


def output(logs: Path, index: int = 0) -> str:
    return (logs / f"replica-{index}.out").read_text()


@pytest.mark.parametrize("strategy", ["one_device", "mirrored"])
def test_accumulated_micro_steps_equal_one_large_step(strategy: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.workers.distribution_probe", strategy, str(tmp_path / "tb")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**replica_env(None), "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # 4 micro-steps of 16 leave the weights where 1 step of 64 does, and only one
    # optimizer step was taken (Adam's first step moves each weight by ~lr).
    assert result["fit_gap"] < 1e-5 and result["loop_gap"] < 1e-5, result
    assert result["fit_moved"] > 0.01, result
    assert result["fit_optimizer_steps"] == result["loop_optimizer_steps"] == 1, result
    # The custom loop's profile of micro-steps 2..3 was written.
    assert len(result["profiles"]) == 1 and result["profiles"][0].startswith("plugins/profile/")
    assert result["shard_policy"] == "DATA"
    # mixed_float16: loss scaling as Keras does it, and accumulation still counts.
    assert result["float16_optimizer"].startswith("LossScaleOptimizer"), result
    assert result["float16_optimizer_steps"] == 2, result


def test_mlp_digits_gang_accumulates_and_shards_by_data(
    reports: Reports,  # noqa: F811
    tmp_path: Path,
) -> None:
    job_id, logs = 161, tmp_path / "logs"
    distribution = {"gradient_accumulation_steps": 4, "shard_policy": "data"}
    envs = gang_envs(
        job_id,
        tmp_path / "job",
        distribution=distribution,
        hyperparameters={"epochs": 2, "steps_per_epoch": 12, "learning_rate": 0.05},
    )
    assert run_replicas(envs, logs) == [0, 0], logs_of(logs)
    for index in (0, 1):
        out = output(logs, index)
        assert "train dataset shard_policy=data auto_shard_policy=DATA" in out
        # 24 batches, 4 to each optimizer step.
        assert "trained optimizer_steps=6 " in out, out[-2000:]
    # 6 steps of a 256-example batch learn something (chance is 0.1; ~0.44 here), and
    # both workers hold the same weights.
    results = finals(reports, job_id)
    assert set(results) == {0, 1}
    assert all(f["eval_accuracy"] > 0.25 for f in results.values()), results
    assert results[0]["eval_loss"] == pytest.approx(results[1]["eval_loss"])


def test_mixed_bfloat16_gang_trains(reports: Reports, tmp_path: Path) -> None:  # noqa: F811
    job_id, logs = 162, tmp_path / "logs"
    envs = gang_envs(
        job_id,
        tmp_path / "job",
        distribution={"mixed_precision": "mixed_bfloat16"},
        hyperparameters={"epochs": 3},
    )
    assert run_replicas(envs, logs) == [0, 0], logs_of(logs)
    assert "cohort: mixed_precision=mixed_bfloat16" in output(logs)
    assert "compute_dtype=bfloat16" in output(logs)
    results = finals(reports, job_id)
    assert set(results) == {0, 1}
    assert all(f["eval_accuracy"] >= 0.8 for f in results.values()), results


def test_profile_of_a_step_range(tmp_path: Path) -> None:
    job_id, logs, job_dir = 163, tmp_path / "logs", tmp_path / "job"
    env = replica_env(
        spec(job_id, job_dir, hyperparameters=SHORT, profile={"first_step": 3, "last_step": 5})
    )
    assert run_replicas([env], logs) == [0], logs_of(logs)
    out = output(logs)
    assert out.index("cohort: profiling steps 3..5") < out.index("cohort: profile written")
    profiles = list((job_dir / "tensorboard" / "replica-0").glob("plugins/profile/*/*.xplane.pb"))
    assert len(profiles) == 1 and profiles[0].stat().st_size > 0


def test_model_parallel_example_uses_two_logical_devices(
    reports: Reports,  # noqa: F811
    tmp_path: Path,
) -> None:
    job_id, logs = 164, tmp_path / "logs"
    env = replica_env(
        spec(
            job_id,
            tmp_path / "job",
            trainer="examples.model_parallel.trainer:train",
            distribution={"devices_per_replica": 2, "cpu_devices": 2},
            hyperparameters={"epochs": 2},
        )
    )
    assert run_replicas([env], logs) == [0], logs_of(logs)
    placed = [line for line in output(logs).splitlines() if line.startswith("placed ")]
    assert any(line.endswith("device:CPU:0") for line in placed), placed
    assert any(line.endswith("device:CPU:1") for line in placed), placed
    assert finals(reports, job_id)[0]["eval_accuracy"] >= 0.8


def test_cnn_digits_one_device(reports: Reports, tmp_path: Path) -> None:  # noqa: F811
    job_id, logs = 165, tmp_path / "logs"
    env = replica_env(spec(job_id, tmp_path / "job", trainer="cnn_digits"))
    assert run_replicas([env], logs) == [0], logs_of(logs)
    assert finals(reports, job_id)[0]["eval_accuracy"] >= 0.85
    assert (tmp_path / "job" / "model" / "saved_model.pb").is_file()


def test_cnn_digits_two_replica_gang(reports: Reports, tmp_path: Path) -> None:  # noqa: F811
    job_id, logs = 166, tmp_path / "logs"
    envs = gang_envs(job_id, tmp_path / "job", trainer="cnn_digits")
    assert run_replicas(envs, logs) == [0, 0], logs_of(logs)
    results = finals(reports, job_id)
    assert set(results) == {0, 1}
    assert all(f["eval_accuracy"] >= 0.85 for f in results.values()), results
    assert results[0]["eval_accuracy"] == pytest.approx(results[1]["eval_accuracy"])
