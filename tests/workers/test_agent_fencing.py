"""The agent's own safety rules, with real child processes and no TensorFlow."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import redis

from services.settings import Settings
from workers.node.agent import Agent
from workers.node.exits import exit_code_of
from workers.node.launcher import ReplicaKey, ReplicaProcess


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                            start_new_session=True)


def test_agent_out_of_touch_past_its_lease_stops_its_replicas(tmp_path: Path) -> None:
    settings = Settings(DATA_DIR=tmp_path, NODE_ID="fenced", HEARTBEAT_INTERVAL=0.2,
                        NODE_KEY="ab" * 32, AGENT_LEASE=1.0, STOP_GRACE=1.0)
    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.1)
    agent = Agent(settings, unreachable)
    process = sleeper()
    key = ReplicaKey(1, 1, 0)
    agent.processes[key] = ReplicaProcess(key, process, tmp_path / "log", time.time())
    thread = threading.Thread(target=agent.heartbeat_loop, daemon=True)
    started = time.monotonic()
    thread.start()
    try:
        process.wait(timeout=20)
        assert time.monotonic() - started >= settings.AGENT_LEASE
        assert exit_code_of(process.returncode) == 143  # SIGTERM, from the fence
    finally:
        agent.stopping.set()
        if process.poll() is None:
            process.kill()


def test_agent_in_touch_keeps_its_replicas(tmp_path: Path) -> None:
    from tests.conftest import REDIS_BASE

    settings = Settings(DATA_DIR=tmp_path, NODE_ID="healthy", HEARTBEAT_INTERVAL=0.2,
                        NODE_KEY="ab" * 32, AGENT_LEASE=1.0)
    agent = Agent(settings, redis.Redis.from_url(f"{REDIS_BASE}/12"))
    process = sleeper()
    key = ReplicaKey(1, 1, 0)
    agent.processes[key] = ReplicaProcess(key, process, tmp_path / "log", time.time())
    thread = threading.Thread(target=agent.heartbeat_loop, daemon=True)
    thread.start()
    try:
        # Three lease periods of healthy heartbeats: the replica must still run.
        deadline = time.monotonic() + 3 * settings.AGENT_LEASE
        while time.monotonic() < deadline:
            assert process.poll() is None
            time.sleep(0.1)
        assert psutil.pid_exists(process.pid)
    finally:
        agent.stopping.set()
        process.kill()
        process.wait()
