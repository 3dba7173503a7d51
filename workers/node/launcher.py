"""Spawn one replica process (never through a shell), and stop its process group.

The agent imports this module, never TensorFlow: TF (and CUDA) must not be
loaded in a process that forks, and each replica gets a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.cluster import tf_config

# Variables a replica must not inherit: it talks to the control plane through
# Redis only, never SQL.
_WITHHELD = ("COHORT_DATABASE_URL", "COHORT_BOOTSTRAP_TOKEN", "TF_CONFIG")


@dataclass(frozen=True)
class ReplicaKey:
    job_id: int
    attempt: int
    index: int

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> ReplicaKey:
        return cls(int(payload["job_id"]), int(payload["attempt"]), int(payload["index"]))


@dataclass
class ReplicaProcess:
    key: ReplicaKey
    popen: subprocess.Popen[bytes]
    log_path: Path
    started_at: float
    stop_requested: threading.Event = field(default_factory=threading.Event)


def job_dir(data_dir: Path, job_id: int) -> Path:
    """A job's directory on this node: checkpoints, saved model, logs."""
    return data_dir / "jobs" / str(int(job_id))


def log_path(data_dir: Path, key: ReplicaKey) -> Path:
    """Where replica `key` writes its stdout and stderr."""
    return job_dir(data_dir, key.job_id) / "logs" / f"attempt-{key.attempt}" / \
        f"replica-{key.index}.log"


def replica_env(payload: dict[str, Any], redis_url: str, directory: Path) -> dict[str, str]:
    """The environment of a replica process."""
    env = {k: v for k, v in os.environ.items() if k not in _WITHHELD}
    spec = {
        "job_id": int(payload["job_id"]),
        "attempt": int(payload["attempt"]),
        "index": int(payload["index"]),
        "replicas": int(payload["replicas"]),
        "trainer": str(payload["trainer"]),
        "strategy": str(payload["strategy"]),
        "hyperparameters": dict(payload.get("hyperparameters") or {}),
        "job_dir": str(directory),
    }
    env.update({
        "COHORT_REPLICA": json.dumps(spec),
        "COHORT_REDIS_URL": redis_url,
        # Keras 3's fit() breaks under MultiWorkerMirroredStrategy; tf-keras works.
        "TF_USE_LEGACY_KERAS": "1",
        "CUDA_VISIBLE_DEVICES": str(payload.get("gpu_ids") or ""),
        "PYTHONUNBUFFERED": "1",
        # The replica stops itself when this process dies (see workers/replica/runner.py).
        "COHORT_AGENT_PID": str(os.getpid()),
    })
    if payload.get("tf_config"):
        env["TF_CONFIG"] = tf_config.dumps(payload["tf_config"])
    return env


def spawn(payload: dict[str, Any], data_dir: Path, redis_url: str) -> ReplicaProcess:
    """Start `python -m workers.replica.runner` in its own process group, output to its log file."""
    key = ReplicaKey.from_payload(payload)
    directory = job_dir(data_dir, key.job_id)
    path = log_path(data_dir, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as log_file:
        popen = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            [sys.executable, "-m", "workers.replica.runner"],
            env=replica_env(payload, redis_url, directory),
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: one killpg stops it all
        )
    return ReplicaProcess(key=key, popen=popen, log_path=path, started_at=time.time())


def stop_group(process: ReplicaProcess, grace_seconds: float) -> None:
    """SIGTERM the replica's process group, SIGKILL it if it outlives the grace period."""
    process.stop_requested.set()
    pgid = process.popen.pid  # start_new_session: the group id is the leader's pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.popen.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(pgid, signal.SIGKILL)  # also reaps children the leader left behind
    except ProcessLookupError:
        pass


def tail(path: Path, max_bytes: int = 4000) -> str:
    """The end of a log file (what a person needs to see why a replica failed)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
