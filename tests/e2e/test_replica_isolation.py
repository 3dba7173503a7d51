"""End to end: replicas on a node, through the whole stack (`cohort up`'s processes on
PostgreSQL and Redis, the agent as root). A bundle's trainer runs as its job's own uid with
none of the agent's secrets and no Redis URL, and its metrics still arrive (through its
agent); another job's command is refused the first job's checkpoints by the kernel."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.stack import Stack
from cohort.client import Client
from tests.e2e.conftest import pg_stack_with, wait_terminal
from tests.e2e.test_user_code import failure_of, submit
from workers import layout

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="isolation needs an agent as root"),
]

# A bundle trainer: records who it runs as and what it got, writes a checkpoint.
PROBE = """import json, os

def train(ctx):
    (ctx.checkpoint_dir / "weights.ckpt").write_text("job one's weights")
    (ctx.work_dir / "seen.json").write_text(json.dumps(
        {"uid": os.getuid(), "gid": os.getgid(), "env": dict(os.environ)}))
    return {"probe_metric": 42.0}
"""
READ = "import os, sys; print(os.listdir(sys.argv[1]))"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Stack, Client]]:
    # The agent's environment holds a secret of its own.
    with pg_stack_with(
        tmp_path,
        {
            "AGENT_ONLY_SECRET": "hunter2",
            "COHORT_REPLICA_UID_BASE": "1910000000",
            "COHORT_REPLICA_UID_RANGE": "1000",
        },
    ) as running:
        yield running


def test_replicas_run_as_their_job_and_report_through_their_agent(
    stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    running, client = stack
    code = tmp_path / "code"
    code.mkdir()
    (code / "probe.py").write_text(PROBE)
    first = submit(
        running,
        tmp_path,
        {
            "name": "probe",
            "trainer": "probe:train",
            "replicas": 1,
            "strategy": "one_device",
            "restart_policy": "never",
        },
        code,
    )
    final = wait_terminal(client, first)
    assert final["status"] == "succeeded", failure_of(client, first)
    data_dir = running.settings.data_dir
    seen: dict[str, Any] = json.loads(
        (layout.work_dir(data_dir, first, 1, 0) / "seen.json").read_text()
    )
    assert seen["uid"] == seen["gid"] == 1910000000 + first % 1000
    assert "AGENT_ONLY_SECRET" not in seen["env"]
    assert "hunter2" not in json.dumps(seen["env"])
    assert not [name for name in seen["env"] if "REDIS" in name]
    # Its final metric went file -> agent -> Redis -> SQL.
    assert [(m["name"], m["value"]) for m in client.metrics(first, name="probe_metric")] == [
        ("probe_metric", 42.0)
    ]

    target = layout.checkpoint_dir(data_dir, first)
    assert (target / "weights.ckpt").is_file()
    second = submit(
        running,
        tmp_path,
        {
            "name": "snoop",
            "command": ["python", "-c", READ, str(target)],
            "replicas": 1,
            "strategy": "one_device",
            "restart_policy": "never",
        },
        None,
    )
    final = wait_terminal(client, second, timeout=120)
    assert final["status"] == "failed"
    assert "PermissionError: [Errno 13] Permission denied" in failure_of(client, second)
