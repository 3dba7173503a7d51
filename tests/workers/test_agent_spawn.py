"""The agent hands a replica its spec in a private file, and reports a replica whose
process cannot be started as that replica's exit, with the reason (real processes, no
TensorFlow: the runner stops at the trainer's name, before importing it)."""

from __future__ import annotations

import errno
import json
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from services import exit_codes
from services.settings import Settings
from services.wire.keys import EVENTS_STREAM, NODES_HASH, attempt_key, claim_key
from services.wire.replica import ReplicaLaunch, ReplicaSpec, StartReplica
from tests.conftest import redis_url
from workers import layout
from workers.node.agent import Agent
from workers.node.exits import (
    INTERRUPTED_START_EXIT,
    NO_SPACE_EXIT,
    PORT_TAKEN_EXIT,
    SPAWN_FAILED_EXIT,
    SPAWN_NOT_FOUND_EXIT,
    spawn_exit_code,
)
from workers.node.launcher import ReplicaKey

JOB = 990_101
# More than Linux takes in one environment string (128 KiB): this spec could not
# travel in an environment variable.
BIG = {f"pad_{i:04d}": "x" * 256 for i in range(800)}
# Allow-listed here, so the agent's policy lets it through, but not a module name: the
# runner stops at it before importing TensorFlow.
UNRUNNABLE = "no-such-module:train"


@pytest.fixture
def bus() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url("agent"), decode_responses=True)
    client.delete(
        *(attempt_key(job) for job in range(JOB, JOB + 6)),
        *(claim_key(job, 1, 0) for job in range(JOB, JOB + 6)),
    )
    yield client
    client.close()


def agent(tmp_path: Path, client: redis.Redis, **settings: Any) -> Agent:
    return Agent(
        Settings(
            DATA_DIR=tmp_path,
            NODE_ID="spawn",
            ALLOWED_ENTRYPOINTS=[UNRUNNABLE],
            NODE_KEY="ab" * 32,
            **settings,
        ),
        client,
    )


def start(job_id: int, trainer: str = UNRUNNABLE) -> StartReplica:
    return StartReplica("spawn", ReplicaSpec(job_id, 1, 0, 1, trainer, "one_device", BIG))


def newest_event(client: redis.Redis) -> str:
    """The id of the events stream's newest entry: the stream is shared with other tests
    of the agent, so each reads only what came after."""
    newest = client.xrevrange(EVENTS_STREAM, count=1)
    return str(newest[0][0]) if newest else "0-0"


def exit_event(client: redis.Redis, job_id: int, since: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for _, fields in client.xrange(EVENTS_STREAM, min=f"({since}"):
            data = json.loads(fields["data"])
            if fields["kind"] == "replica_exited" and data["job_id"] == job_id:
                return data
        time.sleep(0.1)
    raise AssertionError(f"no exit of job {job_id} within {timeout:.0f}s")


def test_the_spec_travels_in_a_file_only_the_replica_reads(
    tmp_path: Path, bus: redis.Redis
) -> None:
    node = agent(tmp_path, bus)
    since = newest_event(bus)
    node.start_replica(start(JOB))
    event = exit_event(bus, JOB, since)
    # The runner read the whole spec from the file: it got as far as the trainer's name.
    assert event["exit_code"] == 2, event
    assert f"unknown trainer '{UNRUNNABLE}'" in event["log_tail"]
    path = layout.spec_file(node.data_dir, JOB, 1, 0)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    launch = ReplicaLaunch.decode(path.read_bytes())
    assert launch.spec == start(JOB).spec and len(path.read_bytes()) > 128 * 1024


def test_a_heartbeat_lists_an_ended_replica_as_running_or_exited_never_neither(
    tmp_path: Path, bus: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After its process ends, the agent ships the last lines and points, may reap what
    # the job left, reads the log's tail, then publishes the exit: seconds on a loaded
    # machine. A beat in between that listed the replica neither as running nor as
    # exited made the control plane call it lost ("its agent no longer runs it").
    # The tail is held here to keep that stretch open.
    import workers.node.supervision as supervision_module

    reading, release = threading.Event(), threading.Event()
    real_tail = supervision_module.tail

    def held_tail(path: Path) -> str:
        reading.set()
        release.wait(30)
        return real_tail(path)

    monkeypatch.setattr(supervision_module, "tail", held_tail)
    node = agent(tmp_path, bus)
    key = ReplicaKey(JOB + 3, 1, 0)
    since = newest_event(bus)
    node.start_replica(start(JOB + 3))
    try:
        assert reading.wait(30), "the replica never ended"
        with node.lock:  # what the heartbeat reads, as it reads it
            running = set(node.processes)
            exited = {
                (job, attempt, index): code
                for job, attempt, index, code in node.exits.recent_codes(time.time())
            }
        assert key not in running
        assert exited.get((key.job_id, key.attempt, key.index)) == 2, exited
    finally:
        release.set()
    assert exit_event(bus, JOB + 3, since)["exit_code"] == 2


def exits_since(client: redis.Redis, job_id: int, since: str) -> list[dict[str, Any]]:
    """The exit events of `job_id` published after `since` (read now, not waited for)."""
    events = [
        json.loads(fields["data"]) | {"kind": fields["kind"]}
        for _, fields in client.xrange(EVENTS_STREAM, min=f"({since}")
    ]
    return [e for e in events if e["kind"] == "replica_exited" and e["job_id"] == job_id]


def test_a_start_this_nodes_previous_agent_claimed_is_reported_as_an_exit(
    tmp_path: Path, bus: redis.Redis
) -> None:
    # An agent killed between claiming a replica and reporting its start leaves the claim
    # under its node's name. Its successor ignored every re-sent start as "already
    # claimed", and the gang waited for that replica for good (the chaos soak found a
    # job left `scheduled`). It must neither do that nor start a second copy: it reports
    # the replica as exited, with a retryable code, so the restart policy decides.
    job = JOB + 4
    bus.set(claim_key(job, 1, 0), "spawn")  # as the killed agent left it
    node = agent(tmp_path, bus)
    since = newest_event(bus)
    node.start_replica(start(job))  # answered before it returns: no fetch, no spawn
    [event] = exits_since(bus, job, since)
    assert event["exit_code"] == INTERRUPTED_START_EXIT and event["never_started"], event
    assert exit_codes.is_retryable(event["exit_code"])
    assert "previous agent claimed it" in event["log_tail"], event
    assert node.processes == {}
    node.start_replica(start(job))  # a copy of the message: nothing more
    assert len(exits_since(bus, job, since)) == 1 and node.processes == {}


def test_a_start_another_node_claimed_is_ignored(tmp_path: Path, bus: redis.Redis) -> None:
    job = JOB + 5
    bus.set(claim_key(job, 1, 0), "another-node")
    node = agent(tmp_path, bus)
    since = newest_event(bus)
    node.start_replica(start(job))
    assert exits_since(bus, job, since) == [] and node.processes == {}
    assert bus.get(claim_key(job, 1, 0)) == "another-node"


def test_a_start_being_answered_is_listed_in_the_heartbeat_until_it_is(
    tmp_path: Path, bus: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore of the job's checkpoint (held here) may take minutes before the claim
    and the spawn: meanwhile the beats say the agent works on that start, so the control
    plane does not take it for one left unanswered (watchdog.settle_unanswered_starts)."""
    job = JOB + 2
    restoring, release = threading.Event(), threading.Event()
    node = agent(tmp_path, bus)

    def held_restore(_spec: ReplicaSpec) -> None:
        restoring.set()
        release.wait(30)

    monkeypatch.setattr(node.sidecars, "prepare", held_restore)

    def published() -> dict[str, Any]:
        node.heartbeat()
        return dict(json.loads(json.loads(bus.hget(NODES_HASH, "spawn") or "{}")["body"]))

    since = newest_event(bus)
    answer = threading.Thread(target=node.start_replica, args=(start(job),))
    answer.start()
    try:
        assert restoring.wait(30), "the start never reached its restore"
        assert published()["preparing"] == [[job, 1, 0]]
    finally:
        release.set()
        answer.join(30)
    exit_event(bus, job, since)  # answered: spawned, and exited (the unknown trainer)
    assert published()["preparing"] == []


def test_a_missing_interpreter_is_the_replicas_exit_127(tmp_path: Path, bus: redis.Redis) -> None:
    node = agent(tmp_path, bus, REPLICA_PYTHON=str(tmp_path / "no-such-python"))
    since = newest_event(bus)
    node.start_replica(start(JOB + 1))
    event = exit_event(bus, JOB + 1, since)
    assert event["exit_code"] == SPAWN_NOT_FOUND_EXIT == 127 and event["never_started"]
    assert "could not start the process" in event["log_tail"]
    assert "no-such-python" in event["log_tail"]
    assert node.processes == {}
    assert node.exited[ReplicaKey(JOB + 1, 1, 0)][0] == 127  # in the heartbeat too


def test_a_spec_that_cannot_be_written_is_the_replicas_exit_126(
    tmp_path: Path, bus: redis.Redis
) -> None:
    node = agent(tmp_path, bus)
    # A directory, not empty, where the spec file goes (root may write anywhere: no chmod
    # trick; a file where one of the replica's directories goes the agent replaces).
    blocker = layout.spec_file(node.data_dir, JOB + 2, 1, 0)
    blocker.mkdir(parents=True)
    (blocker / "in-the-way").write_text("")
    since = newest_event(bus)
    node.start_replica(start(JOB + 2))
    event = exit_event(bus, JOB + 2, since)
    assert event["exit_code"] == SPAWN_FAILED_EXIT == 126, event
    assert "could not start the process" in event["log_tail"]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (FileNotFoundError(errno.ENOENT, "No such file"), 127),
        (OSError(errno.E2BIG, "Argument list too long"), 126),
        (PermissionError(errno.EACCES, "Permission denied"), 126),
        (OSError(errno.EAGAIN, "Resource temporarily unavailable"), PORT_TAKEN_EXIT),
        (OSError(errno.ENOSPC, "No space left on device"), NO_SPACE_EXIT),
        (ValueError("embedded null byte"), 126),
    ],
)
def test_spawn_failures_map_to_exit_codes(error: Exception, code: int) -> None:
    assert spawn_exit_code(error) == code
