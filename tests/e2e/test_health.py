"""`cohort health api|scheduler|agent` against a real stack: 0 while each service works,
1 with the reason once it is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from cli.stack import Stack
from tests.e2e.conftest import pg_stack_with, wait_for


def health(stack: Stack, service: str, *args: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "cli", "health", service, *args],
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, (done.stdout, done.stderr)  # one line saying why
    return done.returncode, lines[0]


def test_health_follows_each_service(tmp_path: Path) -> None:
    with pg_stack_with(tmp_path) as (stack, _client):
        assert health(stack, "api") == (0, f"healthy: api: ready at {stack.url}/readyz")
        code, line = wait_for(
            lambda: (r := health(stack, "scheduler"))[0] == 0 and r, 60, "a scheduling pass"
        )
        assert line.startswith("healthy: scheduler: last pass")
        code, line = health(stack, "agent")
        assert code == 0 and line.startswith("healthy: agent: node 'e2e-node' beat"), line

        # Another node's id: no heartbeat of its own.
        other = subprocess.run(
            [sys.executable, "-m", "cli", "health", "agent"],
            env={**stack.env, "COHORT_NODE_ID": "elsewhere"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert other.returncode == 1
        assert (
            other.stdout.strip() == "unhealthy: agent: no heartbeat from node 'elsewhere' in Redis"
        )

        stack.kill("agent", signal.SIGTERM)  # a clean stop takes its heartbeat away
        code, line = health(stack, "agent")
        assert code == 1 and "no heartbeat from node 'e2e-node'" in line, line

        stack.kill("scheduler", signal.SIGKILL)
        # Its last pass ages: past --max-age the scheduler is unhealthy.
        code, line = wait_for(
            lambda: (r := health(stack, "scheduler", "--max-age", "2"))[0] and r,
            60,
            "the scheduler to turn unhealthy",
        )
        assert code == 1 and "last pass" in line and "more than 2s" in line, line

        stack.kill("api", signal.SIGTERM)
        code, line = health(stack, "api")
        assert code == 1 and line.startswith(f"unhealthy: api: no answer from {stack.url}"), line


def test_health_says_when_redis_is_unreachable(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("COHORT_")},
        "COHORT_REDIS_URL": "redis://:hidden@127.0.0.1:1/0",
        "COHORT_DATA_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-m", "cli", "health", "scheduler"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout.startswith(
        "unhealthy: scheduler: cannot read Redis at redis://:***@127.0.0.1:1/0"
    ), done.stdout
    assert "hidden" not in done.stdout + done.stderr
