"""Redis ACL users per role (services/wire/acl.py, `cohort redis-acl`) on a real Redis 7:
an agent logged in as its own user runs a real job through Celery with nothing refused
(Redis's ACL LOG stays empty), yet cannot read a stream, another node's queue, a job's
live feed or any other key."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from cli.stack import Stack
from cohort.client import Client
from services.wire.acl import acl_file
from services.wire.keys import (
    EVENTS_STREAM,
    LOGS_STREAM,
    METRICS_STREAM,
    NODES_HASH,
    SCHEDULER_LOCK,
    attempt_key,
    live_key,
)
from tests.conftest import create_database, drop_database
from tests.e2e.conftest import E2E_TOKEN, PORT_BASE, free_port, wait_terminal
from tests.e2e.multinode import wait_nodes
from tests.e2e.test_redis_security import redis_server

pytestmark = pytest.mark.e2e

ADMIN = "admin-password-0123456789"
CONTROL = "control-password-0123456789"
AGENTS = {"acl-node": "agent-password-0123456789", "other-node": "other-password-0123456789"}
JOB = {
    "name": "acl",
    "trainer": "mlp_digits",
    "strategy": "one_device",
    "replicas": 1,
    "hyperparameters": {"epochs": 1, "steps_per_epoch": 10},
}


def refused(call: Callable[[], Any]) -> bool:
    try:
        call()
    except redis.exceptions.NoPermissionError:
        return True
    return False


def test_an_agent_as_its_own_acl_user_runs_a_job_and_reads_nothing_else(tmp_path: Path) -> None:
    port = free_port()
    users = tmp_path / "users.acl"
    users.write_text(
        acl_file(control_password=CONTROL, agents=AGENTS)
        # The test's own eyes: ACL LOG is an @admin command, the control
        # plane's user may not run it.
        + f"user test-admin on >{ADMIN} ~* &* +@all\n"
    )
    control_url = f"redis://:{CONTROL}@127.0.0.1:{port}/0"
    agent_url = f"redis://agent-acl-node:{AGENTS['acl-node']}@127.0.0.1:{port}/0"
    name = f"cohort_acl_{free_port()}"
    database = create_database(name)
    with redis_server(tmp_path, "--port", str(port), "--aclfile", str(users), port=port):
        admin = redis.Redis.from_url(
            f"redis://test-admin:{ADMIN}@127.0.0.1:{port}/0", decode_responses=True
        )
        stack = Stack(
            {
                "COHORT_DATABASE_URL": database,
                "COHORT_REDIS_URL": control_url,
                "COHORT_DATA_DIR": str(tmp_path / "data"),
                "COHORT_API_PORT": str(free_port()),
                "COHORT_PORT_RANGE_START": PORT_BASE,
                "COHORT_BOOTSTRAP_TOKEN": E2E_TOKEN,
            },
            quiet=True,
        )
        try:
            stack.start(parts=("api", "scheduler"))
            stack.add_agent("acl-node", 1, redis_url=agent_url)
            client = Client(stack.url, stack.token)
            wait_nodes(client, {"acl-node"})
            admin.acl_log_reset()
            job_id = client.submit(JOB)["id"]
            final = wait_terminal(client, job_id)
            assert final["status"] == "succeeded", final["reason"]
            assert client.metrics(job_id, name="loss")  # through the agent's user
            # Everything the agent, Celery and the replica did was allowed (but redis-py's
            # CLIENT SETINFO on connect, which it does without: services/wire/acl.py).
            denied = [entry for entry in admin.acl_log() if entry.get("object") != "client|setinfo"]
            assert denied == [], [(e["username"], e["object"]) for e in denied]
            health = subprocess.run(
                [sys.executable, "-m", "cli", "health", "agent"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                env={**os.environ, "COHORT_REDIS_URL": agent_url, "COHORT_NODE_ID": "acl-node"},
            )
            assert health.returncode == 0, health.stdout

            agent = redis.Redis.from_url(agent_url, decode_responses=True)
            for probe in (
                lambda: agent.xread({METRICS_STREAM: "0"}),
                lambda: agent.xrange(METRICS_STREAM),
                lambda: agent.xrange(EVENTS_STREAM),
                lambda: agent.xrange(LOGS_STREAM),
                lambda: agent.xread({live_key(job_id): "0"}),
                lambda: agent.get(live_key(job_id)),
                lambda: agent.get(SCHEDULER_LOCK),
                lambda: agent.brpop(["node.other-node"], 1),
                lambda: agent.lrange("node.other-node", 0, -1),
                lambda: agent.hgetall("unacked"),
                lambda: agent.keys("*"),
                lambda: agent.set(attempt_key(job_id), 99),
                lambda: agent.flushdb(),
            ):
                assert refused(probe)
            # What it needs, it may: its heartbeat, an event.
            assert agent.hget(NODES_HASH, "acl-node")
            assert agent.xadd(EVENTS_STREAM, {"kind": "wake", "data": "{}"})

            # And nobody gets in without a user's password.
            with pytest.raises(redis.exceptions.AuthenticationError):
                redis.Redis(port=port).ping()
        finally:
            stack.stop()
            drop_database(name)
