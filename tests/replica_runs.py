"""Cohort's replica runner started as a node agent starts it, with no agent: a launch file
(the spec and the job's directory), the environment (the spec's and metrics file's paths,
TF_CONFIG for a gang on loopback ports) and `python -m workers.replica.runner`. The
runner's own tests (tests/workers) and the benchmarks that time it (bench/) start their
replicas here, and read what each reported from its metrics file, as its agent would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

from cohort.metrics import decode_line
from tests.e2e.conftest import free_ports

ROOT = Path(__file__).resolve().parents[1]
METRICS_FILE = "metrics.jsonl"  # beside its launch file


def write_launch(directory: Path, spec: dict[str, Any], job_dir: Path | str) -> Path:
    """A launch file as the agent writes one (COHORT_REPLICA_SPEC names it) in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "spec.json"
    path.write_text(json.dumps({"spec": spec, "job_dir": str(job_dir)}))
    return path


def runner_env(
    launch: Path | None = None, tf_config: dict[str, Any] | None = None, **more: str
) -> dict[str, str]:
    """The environment the agent gives a replica: this one's without Cohort's settings,
    the launch file and the metrics file beside it, TF_CONFIG, no GPU, legacy Keras."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith("COHORT_")}
    env.update(
        TF_USE_LEGACY_KERAS="1",
        CUDA_VISIBLE_DEVICES="",
        TF_CPP_MIN_LOG_LEVEL="2",  # keeps the logs attached to a failure readable
        **more,
    )
    if launch is not None:
        env["COHORT_REPLICA_SPEC"] = str(launch)
        env["COHORT_METRICS_FILE"] = str(launch.parent / METRICS_FILE)
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return env


def cluster_configs(roles: list[tuple[str, int]]) -> list[dict[str, Any] | None]:
    """Each process's TF_CONFIG for (role, index) pairs on free loopback ports; [None]
    for a process alone."""
    if len(roles) == 1:
        return [None]
    cluster: dict[str, list[str]] = {}
    for (role, _), port in zip(roles, free_ports(len(roles)), strict=True):
        cluster.setdefault(role, []).append(f"127.0.0.1:{port}")
    return [{"cluster": cluster, "task": {"type": role, "index": index}} for role, index in roles]


def worker_configs(workers: int) -> list[dict[str, Any] | None]:
    """TF_CONFIGs of a multi_worker_mirrored gang of `workers` ([None] for one)."""
    return cluster_configs([("worker", index) for index in range(workers)])


def start_runner(
    env: dict[str, str], out: IO[bytes], err: IO[bytes] | int = subprocess.STDOUT
) -> subprocess.Popen[bytes]:
    """`python -m workers.replica.runner` in `env`, its output to `out` (and `err`)."""
    return subprocess.Popen(
        [sys.executable, "-m", "workers.replica.runner"], env=env, cwd=ROOT, stdout=out, stderr=err
    )


def reported(metrics_file: Path) -> list[tuple[int, str, float, float, int | None]]:
    """(step, name, value, ts, epoch) of every point the replica wrote to its file."""
    return [
        point for raw in metrics_file.read_bytes().splitlines() for point in decode_line(raw).points
    ]
