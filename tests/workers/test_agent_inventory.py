"""The agent's beats say its GPU inventory is pending until it has listed its GPUs, and the
beat after the listing goes at once (not a heartbeat interval later)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from services.settings import Settings
from services.wire.keys import NODES_HASH
from tests.conftest import redis_url
from tests.e2e.test_gpus import FAKE_NVIDIA_SMI
from workers.node.agent import Agent


@pytest.fixture
def bus() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url("agent"), decode_responses=True)
    client.delete(NODES_HASH)
    yield client
    client.close()


def last_beat(bus: redis.Redis, node_id: str) -> dict[str, Any]:
    beat: dict[str, Any] = json.loads(json.loads(bus.hget(NODES_HASH, node_id) or "{}")["body"])
    return beat


def test_beats_say_the_inventory_is_pending_until_the_gpus_are_listed(
    tmp_path: Path, bus: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    agent = Agent(
        Settings(
            DATA_DIR=tmp_path / "data",
            NODE_ID="inventory",
            NODE_KEY="ab" * 32,
            NODE_GPU_PROBE=False,
        ),
        bus,
    )
    agent.heartbeat()
    first = last_beat(bus, "inventory")
    assert first["inventory_pending"] is True and first["gpus"] == 0

    agent.find_gpus()  # beats by itself once the GPUs are known
    listed = last_beat(bus, "inventory")
    assert listed["inventory_pending"] is False
    assert listed["gpus"] == 2 and listed["gpu_ids"] == [0, 1]
    assert listed["ts"] > first["ts"]
