"""One agent per node id and DATA_DIR (workers/node/data_dir_lock.py), on real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workers.node.data_dir_lock import DataDirInUse, hold


def test_a_second_hold_of_one_node_on_one_dir_is_refused_naming_the_holder(tmp_path: Path) -> None:
    first = hold(tmp_path / "data", "node-a")
    with pytest.raises(DataDirInUse) as refused:
        hold(tmp_path / "data", "node-a")
    message = str(refused.value)
    assert f"node node-a, pid {os.getpid()}" in message and "COHORT_DATA_DIR" in message
    # Another node on the same directory (shared storage), or the same node elsewhere.
    held = [hold(tmp_path / "data", "node-b"), hold(tmp_path / "other", "node-a")]
    first.close()  # as when its agent dies, however it dies
    again = hold(tmp_path / "data", "node-a")
    for handle in (*held, again):
        handle.close()


def test_a_node_id_never_names_a_path(tmp_path: Path) -> None:
    handle = hold(tmp_path / "data", "../../etc/x")
    handle.close()
    assert [p.name for p in (tmp_path / "data").iterdir()][0].startswith("agent-")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
