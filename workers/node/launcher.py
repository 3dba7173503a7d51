"""Spawn one replica process (never through a shell), and where its files go.

The agent imports this module, never TensorFlow: TF (and CUDA) must not be
loaded in a process that forks, and each replica gets a fresh interpreter.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from services.cluster import tf_config
from services.wire.replica import ReplicaLaunch, ReplicaSpec, StartReplica
from workers.node.processes import stop_process_group

# Variables a replica must not inherit: it talks to the control plane through
# Redis only, never SQL.
_WITHHELD = ("COHORT_DATABASE_URL", "COHORT_BOOTSTRAP_TOKEN", "TF_CONFIG")


@dataclass(frozen=True)
class ReplicaKey:
    job_id: int
    attempt: int
    index: int

    @classmethod
    def of(cls, spec: ReplicaSpec) -> ReplicaKey:
        return cls(spec.job_id, spec.attempt, spec.index)


@dataclass
class ReplicaProcess:
    key: ReplicaKey
    popen: subprocess.Popen[bytes]
    log_path: Path
    started_at: float
    stop_requested: threading.Event = field(default_factory=threading.Event)

    def stop(self, grace_seconds: float) -> None:
        """SIGTERM the replica's process group, SIGKILL it after the grace period."""
        self.stop_requested.set()
        stop_process_group(self.popen, grace_seconds)


def job_dir(data_dir: Path, job_id: int) -> Path:
    """A job's directory on this node: checkpoints, saved model, logs."""
    return data_dir / "jobs" / str(int(job_id))


def log_path(data_dir: Path, key: ReplicaKey) -> Path:
    """Where replica `key` writes its stdout and stderr."""
    return job_dir(data_dir, key.job_id) / "logs" / f"attempt-{key.attempt}" / \
        f"replica-{key.index}.log"


def spec_path(data_dir: Path, key: ReplicaKey) -> Path:
    """Where replica `key` reads its spec (the runner's COHORT_REPLICA_SPEC)."""
    return job_dir(data_dir, key.job_id) / f"attempt-{key.attempt}" / \
        f"replica-{key.index}" / "spec.json"


def write_spec(path: Path, launch: ReplicaLaunch) -> None:
    """Write a replica's spec readable by this user only, whole or not at all."""
    # A file, not an environment variable: Linux refuses one variable over 128 KiB
    # (E2BIG), and big hyperparameters would then keep a placed job from ever starting.
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    temporary = path.with_suffix(".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)  # O_CREAT's mode does not apply to an old file
        handle.write(launch.encode())
    os.replace(temporary, path)


def replica_env(message: StartReplica, redis_url: str, spec_file: Path) -> dict[str, str]:
    """The environment of a replica process."""
    env = {k: v for k, v in os.environ.items() if k not in _WITHHELD}
    env.update({
        "COHORT_REPLICA_SPEC": str(spec_file),
        "COHORT_REDIS_URL": redis_url,
        # Keras 3's fit() breaks under MultiWorkerMirroredStrategy; tf-keras works.
        "TF_USE_LEGACY_KERAS": "1",
        "CUDA_VISIBLE_DEVICES": message.gpu_ids,
        "PYTHONUNBUFFERED": "1",
        # The replica stops itself when this process dies (see workers/replica/runner.py).
        "COHORT_AGENT_PID": str(os.getpid()),
    })
    if message.tf_config:
        env["TF_CONFIG"] = tf_config.dumps(message.tf_config)
    return env


def spawn(message: StartReplica, data_dir: Path, redis_url: str,
          python: str) -> ReplicaProcess:
    """Start `<python> -m workers.replica.runner` in its own process group, output to its
    log file; raises OSError if it cannot be started (or its spec not written)."""
    key = ReplicaKey.of(message.spec)
    directory = job_dir(data_dir, key.job_id)
    spec_file = spec_path(data_dir, key)
    write_spec(spec_file, ReplicaLaunch(message.spec, directory.absolute()))
    path = log_path(data_dir, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as log_file:
        popen = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            [python, "-m", "workers.replica.runner"],
            env=replica_env(message, redis_url, spec_file),
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: one killpg stops it all
        )
    return ReplicaProcess(key=key, popen=popen, log_path=path, started_at=time.time())


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
