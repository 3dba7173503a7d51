"""An agent's start ends what a previous agent of its node left running, and nothing else
(workers/node/leftovers.py): real processes, found by the marks in their environment."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from workers.node import leftovers
from workers.node.environment import agent_marks


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        process.kill()
        process.wait()


def sleeper(
    processes: list[subprocess.Popen[bytes]], node_id: str, data_dir: Path
) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        ["sleep", "600"],
        start_new_session=True,
        env={**os.environ, **agent_marks(node_id, data_dir)},
    )
    processes.append(process)
    return process


def test_a_predecessors_frozen_processes_are_ended_and_no_other_agents(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]], caplog: pytest.LogCaptureFixture
) -> None:
    ours = [sleeper(spawned, "node-a", tmp_path / "data") for _ in range(2)]
    for process in ours:
        os.kill(process.pid, signal.SIGSTOP)  # frozen when its agent died
    same_id_elsewhere = sleeper(spawned, "node-a", tmp_path / "other-data")
    another_node = sleeper(spawned, "node-b", tmp_path / "data")
    # The killed ones stay zombies here (this test is their parent and has not reaped
    # them), as orphans do until init reaps them: a zombie counts as ended, so the wait
    # returns with both still zombies instead of running out its timeout.
    with caplog.at_level(logging.WARNING, logger="cohort.agent"):
        assert leftovers.end_predecessors("node-a", tmp_path / "data", timeout=10) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "ended 2 processes a previous agent of node node-a left running"
    ]
    assert {psutil.Process(p.pid).status() for p in ours} == {psutil.STATUS_ZOMBIE}
    for process in ours:
        assert process.wait(timeout=5) == -signal.SIGKILL
    for process in (same_id_elsewhere, another_node):
        assert psutil.Process(process.pid).status() != psutil.STATUS_ZOMBIE
        assert process.poll() is None
    # Nothing left of this node's: a second start ends nothing.
    assert leftovers.end_predecessors("node-a", tmp_path / "data") == 0
