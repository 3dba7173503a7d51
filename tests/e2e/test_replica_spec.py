"""End to end: the replica spec travels in a file, so big hyperparameters start; a replica
whose process cannot be started fails its job with the reason, instead of holding its
slots in `scheduled`."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cli.stack import Stack
from cohort.client import Client
from services.wire.replica import ReplicaLaunch
from tests.capabilities import LACKS
from tests.e2e.conftest import pg_stack_with, wait_terminal

# Linux refuses one environment string longer than this (MAX_ARG_STRLEN): E2BIG.
ENV_STRING_LIMIT = 128 * 1024
# As many extras as the schema takes: identifier keys, strings of at most 256 characters.
BIG = {f"pad_{i:04d}": "x" * 256 for i in range(800)}


MISSING_PYTHON = {"COHORT_REPLICA_PYTHON": "/nonexistent/no-such-python"}


@pytest.fixture
def missing_python_stack(tmp_path: Path) -> Iterator[tuple[Stack, Client]]:
    """The stack on PostgreSQL, its agent configured with a Python that does not exist
    and running as a user that is not root: as root, replicas run as their job's uid and
    the agent refuses such an interpreter at start (the test above), so as root the agent
    runs as an unprivileged account made for this test."""
    if os.geteuid() != 0:
        with pg_stack_with(tmp_path, MISSING_PYTHON) as stack:
            yield stack
        return
    with unprivileged_user() as user:
        data = tmp_path / "data"
        data.mkdir()
        os.chown(data, user.pw_uid, user.pw_gid)  # the agent's DATA_DIR is its own
        with pg_stack_with(tmp_path, MISSING_PYTHON, parts=("api", "scheduler")) as started:
            stack, client = started
            stack._spawn(
                "agent",
                [*as_user(user), sys.executable, "-m", "cli", "agent"],
                {**stack.agent_env(stack.env["COHORT_NODE_ID"]), "HOME": str(data)},
            )
            stack._wait_for_node(client)
            yield started


def as_user(user: pwd.struct_passwd) -> list[str]:
    """The argv prefix that runs a program as `user`, with no other group (exec, no fork)."""
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"]


@contextmanager
def unprivileged_user() -> Iterator[pwd.struct_passwd]:
    """A system account with no home and no login, made for one test and removed after."""
    name = f"cohort-{secrets.token_hex(4)}"
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )
    try:
        user = pwd.getpwnam(name)
        can_run = subprocess.run(
            [*as_user(user), sys.executable, "-c", "import workers.node.agent"],
            capture_output=True,
            cwd="/",
        )
        if can_run.returncode != 0:
            # Then no replica could run as its job's uid either: every root stack fails.
            pytest.skip(LACKS + f"an interpreter other users can run ({sys.executable})")
        yield user
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.mark.e2e
@pytest.mark.skipif(os.geteuid() != 0, reason=LACKS + "root (replicas run as the agent)")
def test_an_agent_whose_replicas_cannot_run_its_python_does_not_start(tmp_path: Path) -> None:
    # As root, replicas run as their job's uid: the agent checks at start that such a uid
    # can run the interpreter, and stops with the reason rather than fail every job.
    with pytest.raises(RuntimeError, match="agent exited"), pg_stack_with(tmp_path, MISSING_PYTHON):
        pass
    log = (tmp_path / "data" / "logs" / "agent.log").read_text()
    assert "cannot run /nonexistent/no-such-python" in log, log[-2000:]


@pytest.mark.e2e
def test_big_hyperparameters_start_and_succeed(pg_stack: tuple[Stack, Client]) -> None:
    stack, client = pg_stack
    hyperparameters = {"epochs": 1, "steps_per_epoch": 5, **BIG}
    assert len(json.dumps(hyperparameters)) > 200_000 > ENV_STRING_LIMIT
    job = client.submit(
        {
            "name": "big-hp",
            "trainer": "mlp_digits",
            "replicas": 2,
            "strategy": "multi_worker_mirrored",
            "hyperparameters": hyperparameters,
        }
    )
    final = wait_terminal(client, job["id"])
    assert final["status"] == "succeeded", final["reason"]

    # Each replica read its whole spec from a file only this user may read.
    job_dir = stack.settings.data_dir / "jobs" / str(job["id"])
    for index in (0, 1):
        path = job_dir / "attempt-1" / f"replica-{index}" / "spec.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        launch = ReplicaLaunch.decode(path.read_bytes())
        assert launch.spec.hyperparameters == final["hyperparameters"]  # defaults filled in
        assert launch.spec.hyperparameters.items() >= hyperparameters.items()
        assert (launch.spec.index, launch.job_dir) == (index, job_dir)


@pytest.mark.e2e
def test_a_replica_that_cannot_start_fails_its_job_with_the_reason(
    missing_python_stack: tuple[Stack, Client],
) -> None:
    _, client = missing_python_stack
    job = client.submit(
        {
            "name": "no-python",
            "trainer": "mlp_digits",
            "replicas": 2,
            "strategy": "multi_worker_mirrored",
            "restart_policy": "exit_code",
            "max_restarts": 2,
            "hyperparameters": {"epochs": 1},
        }
    )
    final = wait_terminal(client, job["id"], timeout=60)
    assert final["status"] == "failed"
    # 127, as a shell says "command not found": permanent, so not restarted.
    assert "exited with code 127 (permanent)" in final["reason"], final["reason"]
    assert "could not start the process" in final["reason"]
    assert "no-such-python" in final["reason"]
    assert "not restarted: the exit code is not retryable" in final["reason"]
    assert final["attempt"] == 1
    assert {r["exit_code"] for r in final["replica_list"] if r["status"] == "failed"} == {127}
    assert client.events(job["id"])[-1]["reason"] == final["reason"]
