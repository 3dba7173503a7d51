"""Fault-test fixtures: the real stack on PostgreSQL with its own Redis (which a test may
kill and restart) and short timeouts, plus helpers that record what each fault cost."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from cli.stack import Stack
from cohort.client import Client
from tests.conftest import create_database, drop_database
from tests.e2e.conftest import PORT_BASE, free_port, job_story, wait_for
from tests.faults.nothing_lost import agent_data_dirs
from tests.faults.processes import attempt_processes
from workers import layout
from workers.node import leftovers
from workers.node.checkpoint_names import named_checkpoints

# COHORT_BOOTSTRAP_TOKEN: an admin token needs at least 32 characters.
FAULT_TOKEN = "fault-bootstrap-token-for-tests-only"

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

# Short enough to keep the tests quick, long enough not to fire on a busy 2-core box.
# The progress timeout least of all: a healthy gang's replicas report a step every few
# milliseconds here, yet on slow machines a restarted gang was judged hung at 8 s (three
# clean-clone runs, load 6 and more), failing tests whose fault was something else. 20 s
# costs only the test of a hung replica, which waits it out once.
FAST = {
    "COHORT_HEARTBEAT_INTERVAL": "1",
    "COHORT_NODE_TIMEOUT": "6",
    "COHORT_AGENT_LEASE": "4",
    "COHORT_PROGRESS_TIMEOUT": "20",
    "COHORT_STARTUP_TIMEOUT": "90",
    "COHORT_RESTART_BACKOFF": "1",
    "COHORT_STOP_GRACE": "5",
    "COHORT_SCHEDULER_INTERVAL": "0.5",
    # A lost start or stop is sent again after this long (defaults 20 and 15 s): the tests
    # that drop them wait it out. A copy is harmless (an agent acts on a start once, by
    # its claim; a stop to a process already gone does nothing), so short is safe.
    "COHORT_START_RESEND_AFTER": "8",
    "COHORT_STOP_RESEND_AFTER": "8",
}

# The fault tests' gang: 2 replicas, restarted on failure up to twice. LONG_JOB trains
# mlp_digits; a control-plane test runs `stepping_job(steps, seconds, **GANG)` instead
# (tests/e2e/stepper.py).
GANG: dict[str, Any] = {"replicas": 2, "restart_policy": "on_failure", "max_restarts": 2}
LONG_JOB: dict[str, Any] = {
    "name": "long",
    **GANG,
    "hyperparameters": {"epochs": 4, "steps_per_epoch": 100},
}
LONG_JOB_STEPS = (
    LONG_JOB["hyperparameters"]["epochs"] * LONG_JOB["hyperparameters"]["steps_per_epoch"]
)


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., tuple[Stack, Client]]]:
    """Start a stack: `make_stack(slots=2)`; stopped and its database dropped after.
    `database_url`: a migrated database of the test's own instead of one on the shared
    server (a test that restarts PostgreSQL: tests/pgserver.py)."""
    made: list[tuple[Stack, str | None]] = []

    def make(slots: int = 2, database_url: str | None = None, **env: str) -> tuple[Stack, Client]:
        name = None if database_url else f"cohort_fault_{free_port()}"
        url = database_url or create_database(str(name))
        stack = Stack(
            {
                **FAST,
                "COHORT_DATABASE_URL": url,
                "COHORT_REDIS_URL": "",
                "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
                "COHORT_DATA_DIR": str(tmp_path / f"data-{len(made)}"),
                "COHORT_API_PORT": str(free_port()),
                "COHORT_NODE_ID": "node-a",
                "COHORT_NODE_SLOTS": str(slots),
                "COHORT_PORT_RANGE_START": PORT_BASE,
                "COHORT_BOOTSTRAP_TOKEN": FAULT_TOKEN,
                **env,
            },
            quiet=True,
        )
        made.append((stack, name))
        stack.start()
        return stack, Client(stack.url, stack.token)

    yield make
    for stack, name in made:
        stack.stop()
        if name:
            drop_database(name)


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def running_replica(
    client: Client,
    job_id: int,
    index: int = 0,
    *,
    also: Callable[[dict[str, Any], dict[str, Any]], bool] = lambda job, replica: True,
    timeout: float = 240,
    what: str = "the replica to start",
    interval: float = 0.1,
) -> dict[str, Any]:
    """Replica `index` of the job once it has a pid and `also(job, replica)` holds (what a
    test that signals a replica waits for)."""

    def ready() -> dict[str, Any] | None:
        job = client.job(job_id)
        replica = next((r for r in job["replica_list"] if r["index"] == index), None)
        return replica if replica and replica["pid"] and also(job, replica) else None

    return wait_for(
        ready, timeout, what, interval=interval, explain=lambda: job_story(client, job_id)
    )


def steps_seen(client: Client, job_id: int, attempt: int) -> list[int]:
    points = client.metrics(job_id, name=["loss"], replica=0, attempt=attempt, limit=100_000)
    return [p["step"] for p in points]


def event_time(
    client: Client, job_id: int, status: str, attempt: int | None = None
) -> float | None:
    import datetime as dt

    for event in client.events(job_id):
        if event["to_status"] == status and (attempt is None or event["attempt"] == attempt):
            return dt.datetime.fromisoformat(event["created_at"]).timestamp()
    return None


# Between a gang's `restarting` event and its processes' stop: the stop messages' way
# through Redis to the agents and a poll, on a busy machine.
DELIVERY_SLACK = 5.0


def old_attempt_gone(
    stack: Stack, client: Client, job_id: int, attempt: int, timeout: float = 120
) -> float:
    """Wait until no process of attempt `attempt` is left (processes.attempt_processes:
    the replicas and whatever they started), and assert that it was within the stop
    grace of the job's `restarting` event: a torn-down gang's processes get SIGTERM,
    and SIGKILL once STOP_GRACE has passed. Returns when (unix time)."""
    wait_for(
        lambda: not attempt_processes(stack, job_id, attempt),
        timeout,
        f"every process of attempt {attempt} to be gone",
        interval=0.25,
    )
    gone_at = time.time()
    restarted = event_time(client, job_id, "restarting", attempt=attempt)
    assert restarted is not None, "gone before the gang was restarted"
    bound = stack.settings.STOP_GRACE + DELIVERY_SLACK
    assert gone_at - restarted <= bound, (
        f"attempt {attempt}'s processes went {gone_at - restarted:.1f}s after the restart"
    )
    return gone_at


def saved_checkpoint(chief_dir: Path) -> int | None:
    """n of the newest checkpoint (`ckpt-<n>`) the state file in `chief_dir` names (Keras'
    BackupAndRestore writes the chief's there), if any: the n-th save since the job
    began, as the save counter is restored with the checkpoint."""
    try:
        names = named_checkpoints((chief_dir / "checkpoint").read_bytes())
    except OSError:
        return None
    match = re.fullmatch(r"ckpt-(\d+)", names[0]) if names else None
    return int(match.group(1)) if match else None


def stored_checkpoint(artifacts: Path, job_id: int) -> int | None:
    """The number of the checkpoint the artifact store at `artifacts` names for job
    `job_id` (ckpt-<n>), if any: what a gang restarted elsewhere resumes from (its
    restore takes the store's whenever it differs, workers/node/checkpoint_mirror.py)."""
    return saved_checkpoint(artifacts / "jobs" / str(job_id) / "checkpoints" / "chief")


def chief_checkpoints(stack: Stack, job_id: int) -> Path:
    """Where the chief's checkpoints of job `job_id` are on the stack's own node."""
    return layout.checkpoint_dir(stack.settings.data_dir, job_id) / "chief"


def past_first_checkpoint(stack: Stack, client: Client, spec: dict[str, Any]) -> dict[str, Any]:
    """Submit `spec` and return the job once its first checkpoint is on the stack's own
    node's disk: the moment to break it, whatever the metrics' way to SQL lags (on a busy
    machine, a hundred steps and more)."""
    job = client.submit(spec)
    wait_for(
        lambda: saved_checkpoint(chief_checkpoints(stack, job["id"])),
        180,
        f"job {job['id']}'s first checkpoint",
        interval=0.1,
        explain=lambda: job_story(client, job["id"]),
    )
    return client.job(job["id"])


def steps_redone(last_seen: int, resumed_after: int, since: str) -> str:
    """What a restart cost, for the table: the steps the next attempt trained again, from
    the step it resumed after (`since` says which checkpoint) to the last step the stopped
    attempt stored. When the stopped attempt trained past its last stored point (its last
    points died with it: a killed agent, a full disk), nothing was trained twice and the
    table says which points never arrived."""
    if last_seen >= resumed_after:
        return f"{last_seen - resumed_after} steps redone (since {since})"
    return (
        f"0 steps redone: resumed after step {resumed_after} ({since}); the stopped "
        f"attempt's points of steps {last_seen + 1}-{resumed_after} were never stored"
    )


def record(
    fault: str,
    action: str,
    detect_s: float | None,
    recover_s: float | None,
    lost: str,
    pooled: bool = False,
) -> None:
    """Append one measured row for docs/reliability.md (`pooled`: the same fault to
    replicas that warm processes ran, a row of its own)."""
    ARTIFACTS.mkdir(exist_ok=True)
    row = {
        "fault": fault + (" — warm replicas" if pooled else ""),
        "action": action,
        "detect_s": detect_s,
        "recover_s": recover_s,
        "lost": lost,
        "at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load": round(os.getloadavg()[0], 1),
    }  # times on a busy machine are longer
    with open(ARTIFACTS / "reliability.jsonl", "a") as handle:
        handle.write(json.dumps(row) + "\n")


# The fault tests that kill, freeze or stop replicas or their agent run once more with
# pooled replicas: an agent keeping POOL warm processes (workers/node/pool.py), full
# before the job starts, so that attempt 1's replicas are warm ones.
POOL = 2


def pool_full(stack: Stack, count: int = POOL) -> None:
    """Wait until the stack's agents have said `count` warm processes ready (their log,
    DATA_DIR/pool/warm.log, which agents sharing a DATA_DIR share)."""
    log = layout.pool_dirs(stack.settings.data_dir).log_file
    wait_for(
        lambda: log.is_file() and log.read_text().count(" ready\n") >= count,
        600,  # each imports TensorFlow: minutes on a loaded 2-core machine
        f"{count} warm replica processes",
        explain=lambda: pool_story(stack),
    )


def pool_story(stack: Stack) -> str:
    """Why a pool is not full, for a failure message: the warm processes' log, what the
    agents said of their pools, and each of this stack's warm processes' state, priority
    and CPU time."""
    dirs = layout.pool_dirs(stack.settings.data_dir)
    warm_log = dirs.log_file.read_text()[-3000:] if dirs.log_file.is_file() else "(none)"
    agents = [
        line
        for path in sorted(stack.log_dir.glob("agent*.log"))
        for line in path.read_text(errors="replace").splitlines()
        if "warm" in line or "pool" in line
    ]
    processes = []
    # This stack's warm processes alone (their agents' marks), not another stack's.
    for node_id, data_dir in agent_data_dirs(stack).items():
        for process in leftovers.marked(node_id, data_dir):
            try:
                if "workers.replica.pool_entry" not in " ".join(process.cmdline()):
                    continue
                status, nice, cpu = process.status(), process.nice(), process.cpu_times()
                autogroup = Path(f"/proc/{process.pid}/autogroup").read_text().strip()
            except (psutil.Error, OSError):
                continue  # gone meanwhile
            processes.append(
                f"{node_id} {process.pid} {status} nice {nice} {autogroup} "
                f"cpu {cpu.user + cpu.system:.1f}s"
            )
    return (
        f"warm log:\n{warm_log}\nagents on their pools:\n"
        + "\n".join(agents[-40:])
        + "\nwarm processes:\n"
        + "\n".join(processes)
    )


def warm_replicas(client: Client, job_id: int, attempt: int) -> set[int]:
    """The replicas of `attempt` that warm processes ran (each says so in its log)."""
    lines = client.logs(job_id, attempt=attempt, limit=100_000)
    return {line.replica for line in lines if "cohort: warm replica: process" in line.line}
