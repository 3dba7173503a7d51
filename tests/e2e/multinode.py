"""Helpers for tests with several node agents: start and stop extra `cohort agent` processes
(and a Redis they reach from their own network namespaces), and read a finished job's
placement history."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import redis

from cohort.client import Client
from services.statuses import TERMINAL_STATUSES
from services.wire.signing import node_key
from tests.capabilities import need_redis_server
from tests.conftest import create_database, drop_database
from tests.e2e.conftest import free_port, wait_for
from workers.node.processes import stop_process_group


def redis_and_database(
    cleanup: ExitStack, hosts: list[str], directory: Path, prefix: str
) -> tuple[int, str]:
    """A redis-server of the test's own, listening on the host's loopback and on each of
    `hosts` (agents in other network namespaces reach it there), and a migrated database
    named `prefix_<port>`; both undone by `cleanup`. Returns (redis port, database URL)."""
    port = free_port()
    server = start_redis(port, ["127.0.0.1", *hosts], directory)
    cleanup.callback(server.wait, 10)
    cleanup.callback(server.terminate)
    name = f"{prefix}_{free_port()}"
    url = create_database(name)
    cleanup.callback(drop_database, name)
    return port, url


def start_redis(port: int, binds: list[str], directory: Path) -> subprocess.Popen[bytes]:
    """A redis-server of the test's own listening on `binds` (the host's ends of the
    namespaces' control links too), in its own process group."""
    binary = need_redis_server()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            *binds,
            "--protected-mode",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    client = redis.Redis(port=port, socket_connect_timeout=0.5)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            client.ping()
            return process
        except redis.ConnectionError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError("redis-server for the namespaced agents did not start")


def start_agent(
    env: dict[str, str],
    node_id: str,
    slots: int,
    data_dir: Path,
    address: str = "127.0.0.1",
    prefix: list[str] | None = None,
    **extra: str,
) -> subprocess.Popen[bytes]:
    """One more node agent, in its own process group; `prefix` e.g. `ip netns exec NS`."""
    data_dir.mkdir(parents=True, exist_ok=True)
    # An agent holds its own node's key, never the control plane's signing key.
    child_env = {k: v for k, v in env.items() if k != "COHORT_SIGNING_KEY"}
    child_env = {
        **child_env,
        "COHORT_NODE_ID": node_id,
        "COHORT_NODE_KEY": node_key(env["COHORT_SIGNING_KEY"], node_id),
        "COHORT_NODE_SLOTS": str(slots),
        "COHORT_NODE_ADDRESS": address,
        "COHORT_DATA_DIR": str(data_dir),
        **extra,
    }
    with open(data_dir / "agent.log", "ab") as log:
        return subprocess.Popen(
            [*(prefix or []), sys.executable, "-m", "cli", "agent"],
            env=child_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def stop_agent(process: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM the agent's group (it stops its replicas), SIGKILL what outlives `grace`."""
    stop_process_group(process, grace)


def wait_nodes(client: Client, node_ids: set[str], timeout: float = 60) -> None:
    def ready() -> bool:
        return node_ids <= {n["id"] for n in client.nodes() if n["status"] == "ready"}

    wait_for(ready, timeout, f"nodes {sorted(node_ids)} to register")


def when(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def scheduled_events(client: Client, job_id: int) -> list[dict[str, Any]]:
    return [e for e in client.events(job_id) if e["to_status"] == "scheduled"]


def wait_all_terminal(
    client: Client, job_ids: list[int], timeout: float
) -> dict[int, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    done: dict[int, dict[str, Any]] = {}
    while time.monotonic() < deadline and len(done) < len(job_ids):
        for job_id in job_ids:
            if job_id not in done:
                job = client.job(job_id)
                if job["status"] in TERMINAL_STATUSES:
                    done[job_id] = job
        time.sleep(1.0)
    missing = sorted(set(job_ids) - set(done))
    assert not missing, f"jobs {missing} did not finish in {timeout:.0f}s"
    return done
