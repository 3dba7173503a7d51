"""The agent's own safety rules, with real child processes and no TensorFlow."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import redis

from services.settings import Settings
from workers.node.agent import Agent
from workers.node.exits import exit_code_of
from workers.node.launcher import ReplicaKey, ReplicaProcess
from workers.node.lease import fence_grace


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True
    )


def test_agent_out_of_touch_past_its_lease_stops_its_replicas(tmp_path: Path) -> None:
    settings = Settings(
        DATA_DIR=tmp_path,
        NODE_ID="fenced",
        HEARTBEAT_INTERVAL=0.2,
        NODE_KEY="ab" * 32,
        AGENT_LEASE=1.0,
        STOP_GRACE=1.0,
    )
    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.1)
    started = time.monotonic()
    agent = Agent(settings, unreachable)
    process = sleeper()
    key = ReplicaKey(1, 1, 0)
    agent.processes[key] = ReplicaProcess(key, process, tmp_path / "log", time.time())
    agent.start_heartbeats()
    try:
        process.wait(timeout=20)
        assert time.monotonic() - started >= settings.AGENT_LEASE
        assert exit_code_of(process.returncode) == 143  # SIGTERM, from the fence
    finally:
        agent.stopping.set()
        if process.poll() is None:
            process.kill()


@contextmanager
def silent_redis() -> Iterator[redis.Redis]:
    """A client of a server that accepts connections and never answers: what a Redis
    behind a cut link looks like to a call (it blocks for the whole socket timeout)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)  # the kernel completes the handshakes; nothing reads
        client = redis.Redis(
            port=server.getsockname()[1], socket_timeout=60, socket_connect_timeout=60
        )
        try:
            yield client
        finally:
            client.close()


def test_a_heartbeat_blocked_on_a_cut_link_does_not_delay_the_fence(tmp_path: Path) -> None:
    """The lease lapses on time although the heartbeat call is still waiting for its
    answer (socket timeout 60 s), and the sleeper ignoring SIGTERM is SIGKILLed after the
    fence's grace (the node timeout's margin), not STOP_GRACE."""
    settings = Settings(
        DATA_DIR=tmp_path,
        NODE_ID="cut",
        HEARTBEAT_INTERVAL=0.2,
        NODE_KEY="ab" * 32,
        AGENT_LEASE=1.0,
        NODE_TIMEOUT=3.0,
        STOP_GRACE=30.0,
    )
    with silent_redis() as client:
        started = time.monotonic()
        agent = Agent(settings, client)
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import signal, time; "
                "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)",
            ],
            start_new_session=True,
        )
        key = ReplicaKey(1, 1, 0)
        agent.processes[key] = ReplicaProcess(key, process, tmp_path / "log", time.time())
        agent.start_heartbeats()
        try:
            process.wait(timeout=20)
            gone = time.monotonic() - started
            assert exit_code_of(process.returncode) == 137  # SIGKILL after the grace
            # lease 1 s + grace (3 - 1) / 2 = 1 s, with room for a busy machine
            assert settings.AGENT_LEASE + fence_grace(settings) <= gone < 4.0, gone
        finally:
            agent.stopping.set()
            if process.poll() is None:
                process.kill()


def test_the_fence_does_not_wait_for_a_lock_held_across_a_blocked_call(tmp_path: Path) -> None:
    """A thread holding the agent's lock while it waits on an unreachable Redis (a
    start's claim) must not keep the fence from stopping the replicas."""
    settings = Settings(
        DATA_DIR=tmp_path,
        NODE_ID="locked",
        HEARTBEAT_INTERVAL=0.2,
        NODE_KEY="ab" * 32,
        AGENT_LEASE=1.0,
        STOP_GRACE=1.0,
    )
    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.1)
    agent = Agent(settings, unreachable)
    process = sleeper()
    key = ReplicaKey(1, 1, 0)
    agent.processes[key] = ReplicaProcess(key, process, tmp_path / "log", time.time())
    agent.lock.acquire()
    try:
        agent.start_heartbeats()
        process.wait(timeout=20)
        assert exit_code_of(process.returncode) == 143
    finally:
        agent.lock.release()
        agent.stopping.set()
        if process.poll() is None:
            process.kill()


def test_a_replica_started_while_the_lease_is_lapsed_is_stopped(tmp_path: Path) -> None:
    """While the lease stays lapsed, whatever runs is stopped at the next check."""
    settings = Settings(
        DATA_DIR=tmp_path,
        NODE_ID="lapsed",
        HEARTBEAT_INTERVAL=0.2,
        NODE_KEY="ab" * 32,
        AGENT_LEASE=0.5,
        STOP_GRACE=1.0,
    )
    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.1)
    agent = Agent(settings, unreachable)
    agent.start_heartbeats()
    process = None
    try:
        while agent.lease.left() > 0:
            time.sleep(0.05)
        process = sleeper()
        key = ReplicaKey(1, 1, 0)
        agent.processes[key] = ReplicaProcess(key, process, tmp_path / "log", time.time())
        process.wait(timeout=10)
        assert exit_code_of(process.returncode) == 143
    finally:
        agent.stopping.set()
        if process is not None and process.poll() is None:
            process.kill()


def test_agent_in_touch_keeps_its_replicas(tmp_path: Path) -> None:
    from tests.conftest import redis_url

    settings = Settings(
        DATA_DIR=tmp_path,
        NODE_ID="healthy",
        HEARTBEAT_INTERVAL=0.2,
        NODE_KEY="ab" * 32,
        AGENT_LEASE=1.0,
    )
    agent = Agent(settings, redis.Redis.from_url(redis_url("fencing")))
    process = sleeper()
    key = ReplicaKey(1, 1, 0)
    agent.processes[key] = ReplicaProcess(key, process, tmp_path / "log", time.time())
    agent.start_heartbeats()
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
