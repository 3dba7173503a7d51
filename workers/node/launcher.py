"""Spawn one replica process (never through a shell), and where its files go.

The agent imports this module, never TensorFlow: TF (and CUDA) must not be
loaded in a process that forks, and each replica gets a fresh interpreter.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from services.data_dir import write_private
from services.settings import Settings
from services.wire.replica import ReplicaLaunch, ReplicaSpec, StartReplica
from workers import handoff, python_args
from workers.layout import ReplicaPaths
from workers.node import containers, isolation
from workers.node.environment import replica_env, resolve_argv, warm_program, warm_servable
from workers.node.isolation import ReplicaUser
from workers.node.log_text import screen_text
from workers.node.processes import stop_process_group

if TYPE_CHECKING:
    from workers.node.pool import ReplicaPool, WarmProcess


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
    warm: bool = False  # a warm process of the pool was handed it (workers/node/pool.py)
    # A job with an image: `popen` is its engine client's guard (workers/node/containers.py).
    container: containers.Container | None = None

    def stop(self, grace_seconds: float) -> None:
        """SIGTERM the replica's process group (its container), SIGKILL it after the grace
        period."""
        self.stop_requested.set()
        if self.container is not None:
            containers.stop(self.container, self.popen, grace_seconds)
        else:
            stop_process_group(self.popen, grace_seconds)


def write_spec(path: Path, launch: ReplicaLaunch) -> None:
    """Write a replica's spec readable by this user only, whole or not at all."""
    # A file, not an environment variable: Linux refuses one variable over 128 KiB
    # (E2BIG), and big hyperparameters would then keep a placed job from ever starting.
    write_private(path, launch.encode())


def process_argv(
    message: StartReplica, paths: ReplicaPaths, python: str, env: dict[str, str]
) -> tuple[list[str], Path]:
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


def spawn(
    message: StartReplica,
    data_dir: Path,
    python: str,
    user: ReplicaUser | None,
    pool: ReplicaPool | None,
    settings: Settings,
) -> ReplicaProcess:
    """Start the replica's process in its own process group, as `user` (None: as the
    agent), output to its log file; raises OSError if it cannot be started
    (CommandNotFound: the job's command is not on this node), or its spec not written.
    A replica a warm process may run (environment.warm_servable) goes to a ready one of
    `pool` (the same environment, directory, log and user), else starts cold. A job's
    `image`: a container of it, through the node's CONTAINER_ENGINE
    (workers/node/containers.py)."""
    key = ReplicaKey.of(message.spec)
    paths = ReplicaPaths.of(data_dir, key.job_id, key.attempt, key.index)
    _write_inputs(message, paths, user, settings.STEP_POINTS_PER_SECOND)
    image = message.spec.image is not None
    env = {} if image else replica_env(message, paths)
    cwd = paths.code_dir if message.spec.bundle else paths.work_dir
    argv, cwd = ([], cwd) if image else process_argv(message, paths, python, env)
    cwd.mkdir(parents=True, exist_ok=True)
    _hand_over(paths, user)
    # O_NOFOLLOW: the logs directory is the agent's alone, but never write through a link.
    log_fd = os.open(paths.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    if image:
        with open(log_fd, "ab") as log_file:
            box, client = containers.start(
                message, paths, python, user, settings.CONTAINER_ENGINE, log_file.fileno()
            )
        return ReplicaProcess(key, client, paths.log_file, time.time(), container=box)
    with open(log_fd, "ab") as log_file:
        warm = _take_warm(pool, message.spec, cwd)
        popen = None
        if pool is not None and warm is not None:
            hand_off = handoff.HandOff(
                env,
                str(cwd),
                user.uid if user else None,
                user.gid if user else None,
                isolation.REPLICA_UMASK,
                kept_paths(data_dir, python) if user is not None and user.private_tmp else None,
                program=message.spec.command[1:] if message.spec.command else None,
            )
            popen = pool.hand_off(warm, hand_off, log_file.fileno())
        if popen is None:
            popen = _start_cold(argv, env, cwd, log_file, user, kept_paths(data_dir, python))
    return ReplicaProcess(
        key=key,
        popen=popen,
        log_path=paths.log_file,
        started_at=time.time(),
        warm=warm is not None and popen is warm.popen,
    )


def _hand_over(paths: ReplicaPaths, user: ReplicaUser | None) -> None:
    """What the agent wrote for the replica (spec, code, a restored checkpoint) becomes
    its own."""
    for tree in (
        paths.work_dir,
        paths.checkpoint_dir,
        paths.model_dir,
        paths.tensorboard_dir,
        paths.tmp_dir,
    ):
        isolation.hand_over(tree, user)


def _take_warm(pool: ReplicaPool | None, spec: ReplicaSpec, cwd: Path) -> WarmProcess | None:
    """A warm process for this replica, if it may have one and one is ready. A `python`
    command's directory must not hold a module the warm process imported already (a
    fresh interpreter would import the directory's: workers/python_args.py)."""
    if pool is None or not warm_servable(spec):
        return None
    program = warm_program(spec)
    if program is None:
        return pool.take()
    offered = python_args.module_names(program.path0(cwd))
    return pool.take(unless=lambda preloaded: python_args.shadowed(offered, preloaded))


def _write_inputs(
    message: StartReplica, paths: ReplicaPaths, user: ReplicaUser | None, step_points: float
) -> None:
    """The replica's directories, its spec and its hyperparameters file."""
    spec = message.spec
    isolation.lay_out(paths.data_dir, spec.job_id, spec.attempt, spec.index, user)
    write_spec(paths.spec_file, ReplicaLaunch(spec, paths.job_dir, step_points))
    write_private(paths.hyperparameters_file, json.dumps(spec.hyperparameters))


def kept_paths(data_dir: Path, python: str) -> list[str]:
    """What a replica with its own /tmp must still reach where a node keeps it under /tmp
    (a checkout, a test's directory): DATA_DIR, the interpreter's environment, Cohort's
    code (workers/private_tmp.py binds these back)."""
    code = Path(handoff.__file__).resolve().parent.parent
    return [str(data_dir.absolute()), str(Path(python).parent.parent), str(code)]


def _start_cold(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    log_file: IO[bytes],
    user: ReplicaUser | None,
    keep: list[str],
) -> subprocess.Popen[bytes]:
    """A fresh interpreter for the replica, output to `log_file`."""
    options: dict[str, Any] = {
        "cwd": cwd,
        "stdin": subprocess.DEVNULL,
        "stdout": log_file,
        "stderr": subprocess.STDOUT,
        "start_new_session": True,  # its own process group: one killpg stops it all
    }
    if user is None or not user.private_tmp:
        return subprocess.Popen(  # noqa: S603 - an argv, never a shell
            argv, env=env, **options, **isolation.popen_options(user)
        )
    # Through workers/private_tmp.py, root until it has made the replica's own /tmp and
    # /dev/shm, then the job's user: its environment goes through a pipe, so nothing the
    # job wrote into it (LD_PRELOAD, PYTHONPATH) reaches the part that runs as root.
    read, write = os.pipe()
    try:
        wrapper = [
            argv[0],
            "-I",
            "-m",
            "workers.private_tmp",
            f"--uid={user.uid}",
            f"--gid={user.gid}",
            f"--env-fd={read}",
            *(f"--keep={path}" for path in keep),
            "--",
            *argv,
        ]
        popen = subprocess.Popen(  # noqa: S603 - an argv, never a shell
            wrapper,
            env={"PATH": os.defpath},
            pass_fds=(read,),
            umask=isolation.REPLICA_UMASK,
            **options,
        )
    finally:
        os.close(read)
    with open(write, "wb", buffering=0) as channel, contextlib.suppress(BrokenPipeError):
        channel.write(json.dumps(env).encode())  # it died first: its exit says why
    return popen


def tail(path: Path, max_bytes: int = 4000) -> str:
    """The end of a log file (what a person needs to see why a replica failed)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            return screen_text(handle.read().decode("utf-8", errors="replace"))
    except OSError:
        return ""
