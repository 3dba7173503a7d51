"""Spawn one replica process (never through a shell), and where its files go.

The agent imports this module, never TensorFlow: TF (and CUDA) must not be
loaded in a process that forks, and each replica gets a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from services.wire.replica import ReplicaLaunch, ReplicaSpec, StartReplica
from workers.node import layout
from workers.node.environment import ReplicaPaths, replica_env, resolve_argv
from workers.node.processes import stop_process_group


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
    return layout.job_dir(data_dir, job_id)


def log_path(data_dir: Path, key: ReplicaKey) -> Path:
    """Where replica `key` writes its stdout and stderr."""
    return layout.log_file(data_dir, key.job_id, key.attempt, key.index)


def spec_path(data_dir: Path, key: ReplicaKey) -> Path:
    """Where replica `key` reads its spec (the runner's COHORT_REPLICA_SPEC)."""
    return layout.spec_file(data_dir, key.job_id, key.attempt, key.index)


def write_private(path: Path, text: str) -> None:
    """Write a file readable by this user only, whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    temporary = path.with_suffix(".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)  # O_CREAT's mode does not apply to an old file
        handle.write(text)
    os.replace(temporary, path)


def write_spec(path: Path, launch: ReplicaLaunch) -> None:
    """Write a replica's spec readable by this user only, whole or not at all."""
    # A file, not an environment variable: Linux refuses one variable over 128 KiB
    # (E2BIG), and big hyperparameters would then keep a placed job from ever starting.
    write_private(path, launch.encode())


def process_argv(message: StartReplica, paths: ReplicaPaths, python: str,
                 env: dict[str, str]) -> tuple[list[str], Path]:
    """(argv, cwd) of the replica: Cohort's runner for a `trainer`, else the job's
    `command` (never through a shell) in its code directory."""
    spec = message.spec
    if spec.command is None:
        cwd = paths.code_dir if spec.bundle else paths.job_dir
        # -P: the cwd (the job's code) is not put first on sys.path, so a bundle's own
        # `workers` or `services` package cannot replace Cohort's runner; the runner puts
        # the code directory on sys.path itself, once it has imported what it needs.
        return [python, "-P", "-m", "workers.replica.runner"], cwd
    cwd = paths.code_dir if spec.bundle else paths.work_dir
    # Under the guard, which stops the program if this agent dies (workers/node/guard.py).
    guard = [python, "-P", "-m", "workers.node.guard", str(os.getpid()), "--"]
    return [*guard, *resolve_argv(spec.command, python, env, cwd)], cwd


def spawn(message: StartReplica, data_dir: Path, redis_url: str,
          python: str) -> ReplicaProcess:
    """Start the replica's process in its own process group, output to its log file;
    raises OSError if it cannot be started (CommandNotFound: the job's command is not
    on this node), or its spec not written."""
    key = ReplicaKey.of(message.spec)
    paths = ReplicaPaths.of(data_dir, key.job_id, key.attempt, key.index)
    paths.make()
    write_spec(paths.spec_file, ReplicaLaunch(message.spec, paths.job_dir))
    write_private(paths.hyperparameters_file, json.dumps(message.spec.hyperparameters))
    env = replica_env(message, paths, redis_url)
    argv, cwd = process_argv(message, paths, python, env)
    cwd.mkdir(parents=True, exist_ok=True)
    with open(paths.log_file, "ab") as log_file:
        popen = subprocess.Popen(  # noqa: S603 - an argv, never a shell
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: one killpg stops it all
        )
    return ReplicaProcess(key=key, popen=popen, log_path=paths.log_file,
                          started_at=time.time())


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
