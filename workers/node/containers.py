"""Replicas of jobs with an `image`: each one a container of that image, run through the
node's container engine (COHORT_CONTAINER_ENGINE: docker or podman), never through a shell.

The contract is a process's (workers/node/environment.py): the same variables (TF_CONFIG,
COHORT_*, the job's `env`), the job's directory bind-mounted at the same path, the host's
network (the replica's port is the one placement chose on this node), the job's uid and
gid (workers/node/isolation.py), its GPUs and nothing else, and the command the process
would have run, which the image must be able to run: Cohort's runner for a `trainer`,
`python` for a command's "python" (an image built FROM cohort-worker has both).

The agent runs `<engine> run` under the guard (workers/node/guard.py `--container`) and
supervises that client as it would the process: its output is the replica's log, its exit
status the container's (`--init`: 128+N for a signal, 137 for SIGKILL). Signals sent to the
client do not reach a container for certain (SIGKILL never does), so a stop goes through
the engine (`stop`: SIGTERM, SIGKILL after the grace), a dead agent's guard stops its
container the same way, and a container left by an agent killed outright is removed at the
next agent's start, found by the labels every container carries: this node's id and the
agent's DATA_DIR, as a process carries them in its environment (leftovers.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from services.wire.replica import ReplicaSpec, StartReplica
from workers.layout import ReplicaPaths
from workers.node import guard
from workers.node.environment import replica_env
from workers.node.isolation import ReplicaUser

log = logging.getLogger("cohort.agent")

LABEL_NODE = "cohort.node-id"
LABEL_DATA_DIR = "cohort.data-dir"
LABEL_JOB = "cohort.job"
LABEL_ATTEMPT = "cohort.attempt"
LABEL_INDEX = "cohort.index"
# Past the grace, how long the engine's own commands may take before the client is killed.
ENGINE_MARGIN = 30.0
# Variables the engine's client reads itself: the agent's values go to the client, and a
# replica's variable of such a name is given by value on the command line, so a job's
# `env` can never point the client at another daemon or registry.
_CLIENT_NAMES = frozenset(
    {"PATH", "HOME", "TMPDIR", "REGISTRY_AUTH_FILE", "TZ"}
    | {f"{p}_PROXY" for p in ("HTTP", "HTTPS", "NO", "http", "https", "no")}
)
_CLIENT_PREFIXES = ("DOCKER_", "CONTAINER", "XDG_", "BUILDAH_", "PODMAN_", "STORAGE_", "LC_")
_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")


class ContainerEngineMissing(RuntimeError):
    """A job with an image reached a node whose agent has no container engine."""


@dataclass(frozen=True)
class Container:
    """The container of one replica: its engine's program and its name."""

    engine: str
    name: str


def container_name(node_id: str, data_dir: Path, job_id: int, attempt: int, index: int) -> str:
    """`cohort-<node>-<job>-<attempt>-<index>-<data dir digest>` in the characters a name
    may hold: unique per agent, where two agents of one host share a node id (test
    stacks), each with its own DATA_DIR."""
    node = _NAME_UNSAFE.sub("-", node_id).strip("-.") or "node"
    where = hashlib.sha256(str(Path(data_dir).absolute()).encode()).hexdigest()[:8]
    return f"cohort-{node}-{job_id}-{attempt}-{index}-{where}"


def marks(node_id: str, data_dir: Path) -> dict[str, str]:
    """The labels that make a container one this agent started (environment.agent_marks'
    counterpart)."""
    return {LABEL_NODE: node_id, LABEL_DATA_DIR: str(Path(data_dir).absolute())}


def command_in_image(spec: ReplicaSpec) -> list[str]:
    """What the container runs: Cohort's runner for a `trainer`, else the job's command,
    its "python" the image's own (found on the image's PATH)."""
    if spec.command is None:
        return ["python", "-P", "-m", "workers.replica.runner"]
    return list(spec.command)


def _by_value(name: str) -> bool:
    return name in _CLIENT_NAMES or name.startswith(_CLIENT_PREFIXES)


def run_argv(
    *,
    engine: str,
    spec: ReplicaSpec,
    name: str,
    labels: Mapping[str, str],
    env: Mapping[str, str],
    job_dir: Path,
    workdir: Path,
    uid: int,
    gid: int,
    gpu_ids: str,
) -> list[str]:
    """The engine's `run` argv for one replica (pure; `engine` is the program's path, its
    name docker or podman). A variable goes as `--env NAME`, its value read from the
    client's environment (`client_env`), never on the command line that every user of
    the host can read; those the client reads itself go by value."""
    assert spec.image is not None
    command = command_in_image(spec)
    argv = [engine, "run", "--rm", "--init", "--name", name]
    argv += ["--network", "host", "--user", f"{uid}:{gid}", "--workdir", str(workdir)]
    # The image's HEALTHCHECK is an agent's (cohort-worker's), not a replica's; a replica
    # gains no privilege (no setuid) and holds no capability, as a process of its uid.
    argv += ["--no-healthcheck", "--security-opt", "no-new-privileges", "--cap-drop", "ALL"]
    # Its output is the client's, into the replica's log: the engine keeps no second copy
    # (one growing without bound on the engine's disk for a chatty job).
    argv += ["--log-driver", "none"]
    source = str(Path(job_dir).absolute())
    if "," in source:
        raise ValueError(f"a job directory with a ',' cannot be mounted: {source}")
    argv += ["--mount", f"type=bind,source={source},target={source}"]
    for key, value in sorted(labels.items()):
        argv += ["--label", f"{key}={value}"]
    for variable in sorted(env):
        argv += ["--env", f"{variable}={env[variable]}" if _by_value(variable) else variable]
    argv += gpu_options(Path(engine).name, gpu_ids)
    # The command's program as the entrypoint: an image's own ENTRYPOINT never wraps it.
    return [*argv, f"--entrypoint={command[0]}", spec.image, *command[1:]]


def gpu_options(engine_name: str, gpu_ids: str) -> list[str]:
    """The engine's options that give a container these GPUs (NVML's ids): docker's
    `--gpus "device=0,1"` (quoted: the option is a CSV), podman's CDI devices."""
    ids = [g for g in gpu_ids.split(",") if g]
    if not ids:
        return []
    if engine_name == "podman":
        return [option for g in ids for option in ("--device", f"nvidia.com/gpu={g}")]
    return ["--gpus", f'"device={",".join(ids)}"']


def client_env(agent_env: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The engine client's environment: the agent's variables the client reads itself
    (its PATH, HOME, DOCKER_HOST...), and the replica's, whose values `--env NAME` reads."""
    mine = {name: value for name, value in agent_env.items() if _by_value(name)}
    theirs = {name: value for name, value in env.items() if not _by_value(name)}
    return {**theirs, **mine}


def engine_program(engine: str) -> str:
    """The engine's program on this node's PATH.

    Raises:
        ContainerEngineMissing: no engine set, or its program is not on PATH.
    """
    found = shutil.which(engine) if engine else None
    if found is None:
        raise ContainerEngineMissing(
            "this node runs no containers (set COHORT_CONTAINER_ENGINE=docker or podman, "
            f"its CLI on PATH){f': {engine} not found' if engine else ''}"
        )
    return found


def start(
    message: StartReplica,
    paths: ReplicaPaths,
    python: str,
    user: ReplicaUser | None,
    engine: str,
    log_fd: int,
) -> tuple[Container, subprocess.Popen[bytes]]:
    """Run the replica's container under the guard, output to `log_fd`; its container and
    the guard's process (the leader of a process group of its own, as a process's).

    Raises:
        ContainerEngineMissing: this node has no container engine.
    """
    spec = message.spec
    program = engine_program(engine)
    name = container_name(message.node_id, paths.data_dir, spec.job_id, spec.attempt, spec.index)
    labels = {
        **marks(message.node_id, paths.data_dir),
        LABEL_JOB: str(spec.job_id),
        LABEL_ATTEMPT: str(spec.attempt),
        LABEL_INDEX: str(spec.index),
    }
    env = replica_env(message, paths, container=True)
    argv = run_argv(
        engine=program,
        spec=spec,
        name=name,
        labels=labels,
        env=env,
        job_dir=paths.job_dir,
        workdir=paths.code_dir if spec.bundle else paths.work_dir,
        uid=user.uid if user else os.getuid(),
        gid=user.gid if user else os.getgid(),
        gpu_ids=message.gpu_ids,
    )
    # By its file: the guard is the agent's own, whatever the interpreter has installed.
    guarded = [python, "-P", str(Path(guard.__file__)), str(os.getpid())]
    guarded += ["--container", program, name, "--"]
    popen = subprocess.Popen(  # noqa: S603 - an argv, never a shell
        [*guarded, *argv],
        env=client_env(os.environ, env),
        stdin=subprocess.DEVNULL,
        stdout=log_fd,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as a process's
    )
    return Container(program, name), popen


def _engine(*argv: str, timeout: float) -> subprocess.CompletedProcess[bytes] | None:
    try:
        return subprocess.run(  # noqa: S603 - an argv, never a shell
            argv, capture_output=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("%s: %s", " ".join(argv[:3]), exc)
        return None


def send_signal(container: Container, name: str) -> bool:
    """Send signal `name` ("USR1") to the container's main process through the engine (a
    signal to its client reaches it for certain only so); whether the engine took it."""
    done = _engine(
        container.engine, "kill", "--signal", name, container.name, timeout=ENGINE_MARGIN
    )
    return done is not None and done.returncode == 0


def stop(container: Container, client: subprocess.Popen[bytes], grace: float) -> int:
    """SIGTERM the container, SIGKILL it after `grace` seconds (the engine's `stop`), then
    make sure it is gone; returns the client's exit status. A container not created yet
    (its image still being pulled) is killed once it is, or its client is."""
    seconds = str(max(0, math.ceil(grace)))
    _engine(container.engine, "stop", "--time", seconds, container.name, timeout=grace + 60)
    try:
        client.wait(timeout=ENGINE_MARGIN)
    except subprocess.TimeoutExpired:
        _engine(container.engine, "kill", container.name, timeout=ENGINE_MARGIN)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(client.pid, signal.SIGKILL)
    # `--rm` removes a container that ran; one created but never started stays.
    _engine(container.engine, "rm", "--force", container.name, timeout=ENGINE_MARGIN)
    return client.wait()


def remove_leftovers(engine: str, node_id: str, data_dir: Path) -> int:
    """Remove every container a previous agent of this node (same id, same DATA_DIR) left,
    running or not; returns how many. Called before the agent starts anything."""
    if not engine or shutil.which(engine) is None:
        return 0
    filters = [f"label={key}={value}" for key, value in marks(node_id, data_dir).items()]
    listing = _engine(
        engine,
        "ps",
        "--all",
        "--quiet",
        *(option for f in filters for option in ("--filter", f)),
        timeout=ENGINE_MARGIN,
    )
    if listing is None or listing.returncode != 0:
        log.warning("could not list this node's containers: %r", listing and listing.stderr)
        return 0
    ids = listing.stdout.decode().split()
    if ids:
        _engine(engine, "rm", "--force", *ids, timeout=ENGINE_MARGIN + 10 * len(ids))
        log.warning("removed %d containers a previous agent of node %s left", len(ids), node_id)
    return len(ids)
