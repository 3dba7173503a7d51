"""Replicas on a node, for real (an agent as root, real processes, Redis, a local artifact
store; no TensorFlow): each job's replicas run as the job's own uid, never root; one
job's replicas cannot read another's files; a replica inherits none of the agent's
secrets; the agent still ships, cleans up and ends everything a job left behind."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from services.settings import Settings
from services.storage import keys
from services.storage.store import open_store
from services.wire.keys import EVENTS_STREAM, attempt_key, claim_key
from services.wire.replica import CleanupJob, ReplicaSpec, StartReplica
from tests.conftest import redis_url
from workers import layout
from workers.node.agent import Agent

JOB = 990_401
UID_BASE = 1_900_000_000  # COHORT_REPLICA_UID_BASE for these tests
UID_RANGE = 1000

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="isolation needs an agent as root")

# Job A: says who it runs as, what it got, and writes a checkpoint of its own.
WRITER = """import json, os
ckpt = os.path.join(os.environ["COHORT_CHECKPOINT_DIR"], "secret.ckpt")
with open(ckpt, "w") as handle:
    handle.write("job A's weights")
with open(os.path.join(os.environ["COHORT_WORK_DIR"], "seen.json"), "w") as handle:
    json.dump({"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
               "umask": os.umask(0), "env": dict(os.environ)}, handle)
"""
# Job B: tries to read job A's checkpoint directory, then its file.
READER = """import os, sys
target = sys.argv[1]
for attempt in (lambda: os.listdir(target),
                lambda: open(os.path.join(target, "secret.ckpt")).read()):
    try:
        print("read:", attempt(), flush=True)
    except PermissionError as exc:
        print("refused:", exc, flush=True)
    else:
        sys.exit(0)
sys.exit(3)
"""
# Leaves a daemon behind, outside its process group (a new session), then exits 0.
LEAVER = """import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(os.path.join(os.environ["COHORT_WORK_DIR"], "daemon.pid"), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
    os._exit(0)
deadline = time.time() + 10
while not os.path.exists(os.path.join(os.environ["COHORT_WORK_DIR"], "daemon.pid")):
    if time.time() > deadline:
        sys.exit(4)
    time.sleep(0.05)
"""


@pytest.fixture
def bus() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url("agent"), decode_responses=True)
    client.delete(
        *(attempt_key(job) for job in range(JOB, JOB + 4)),
        *(claim_key(job, attempt, 0) for job in range(JOB, JOB + 4) for attempt in (1, 2)),
    )
    newest = client.xrevrange(EVENTS_STREAM, count=1)
    _since[:] = [str(newest[0][0]) if newest else "0-0"]
    yield client
    client.close()


_since: list[str] = ["0-0"]


@pytest.fixture
def node(tmp_path: Path, bus: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> Iterator[Agent]:
    # The agent's own environment holds secrets a replica must never see.
    monkeypatch.setenv("AGENT_ONLY_SECRET", "hunter2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "store-key")
    monkeypatch.setenv("COHORT_REDIS_URL", "redis://:agent-password@127.0.0.1:1/0")
    monkeypatch.setenv("LC_MESSAGES", "C")
    monkeypatch.setenv("COHORT_REPLICA_UID_BASE", str(UID_BASE))
    monkeypatch.setenv("COHORT_REPLICA_UID_RANGE", str(UID_RANGE))
    agent = Agent(
        Settings(
            DATA_DIR=tmp_path / "data",
            NODE_ID="isolation",
            NODE_KEY="ab" * 32,
            ARTIFACT_URL=str(tmp_path / "store"),
        ),
        bus,
    )
    yield agent
    agent.shutdown(grace=2)


def command_job(job_id: int, script: str, *args: str) -> StartReplica:
    spec = ReplicaSpec(
        job_id,
        1,
        0,
        1,
        None,
        "one_device",
        {},
        command=["python", "-c", script, *args],
        env={"JOB_SETTING": "on"},
    )
    return StartReplica("isolation", spec)


def exit_of(
    client: redis.Redis, job_id: int, attempt: int = 1, timeout: float = 30
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for _, fields in client.xrange(EVENTS_STREAM, min=f"({_since[0]}"):
            data = json.loads(fields["data"])
            if (
                fields["kind"] == "replica_exited"
                and data.get("job_id") == job_id
                and data.get("attempt") == attempt
            ):
                return data
        time.sleep(0.1)
    raise AssertionError(f"no exit of job {job_id} within {timeout:.0f}s")


def owner_and_mode(path: Path) -> tuple[int, int, int]:
    info = os.lstat(path)
    return info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)


def test_a_job_cannot_read_another_jobs_checkpoints(node: Agent, bus: redis.Redis) -> None:
    node.start_replica(command_job(JOB, WRITER))
    done = exit_of(bus, JOB)
    assert done["exit_code"] == 0, done["log_tail"]
    uid_a = UID_BASE + JOB % UID_RANGE
    seen = json.loads((layout.work_dir(node.data_dir, JOB, 1, 0) / "seen.json").read_text())
    # Job A ran as its own uid and gid, no supplementary groups, umask 077.
    assert (seen["uid"], seen["gid"], seen["groups"], seen["umask"]) == (uid_a, uid_a, [], 0o077)
    data = node.data_dir
    assert owner_and_mode(layout.job_dir(data, JOB)) == (0, uid_a, 0o1770)
    assert owner_and_mode(layout.checkpoint_dir(data, JOB)) == (uid_a, uid_a, 0o700)
    assert owner_and_mode(layout.work_dir(data, JOB, 1, 0)) == (uid_a, uid_a, 0o700)
    assert owner_and_mode(layout.log_file(data, JOB, 1, 0).parent)[::2] == (0, 0o700)
    assert owner_and_mode(layout.checkpoint_dir(data, JOB) / "secret.ckpt") == (uid_a, uid_a, 0o600)

    # Job B, on the same node, is refused job A's checkpoint directory by the kernel.
    target = layout.checkpoint_dir(data, JOB)
    node.start_replica(command_job(JOB + 1, READER, str(target)))
    refused = exit_of(bus, JOB + 1)
    assert refused["exit_code"] == 3, refused["log_tail"]
    assert refused["log_tail"].count("refused: [Errno 13] Permission denied") == 2, refused[
        "log_tail"
    ]
    # The same program as job A itself reads it: the refusal is the other uid's.
    bus.set(attempt_key(JOB), 2)
    node.start_replica(
        StartReplica(
            "isolation",
            ReplicaSpec(
                JOB, 2, 0, 1, None, "one_device", {}, command=["python", "-c", READER, str(target)]
            ),
        )
    )
    own = exit_of(bus, JOB, attempt=2)
    assert own["exit_code"] == 0 and "read: ['secret.ckpt']" in own["log_tail"], own


def test_a_replica_inherits_none_of_the_agents_secrets(node: Agent, bus: redis.Redis) -> None:
    node.start_replica(command_job(JOB + 2, WRITER))
    assert exit_of(bus, JOB + 2)["exit_code"] == 0
    env = json.loads((layout.work_dir(node.data_dir, JOB + 2, 1, 0) / "seen.json").read_text())[
        "env"
    ]
    leaked = {
        name
        for name in env
        if name
        in (
            "AGENT_ONLY_SECRET",
            "AWS_SECRET_ACCESS_KEY",
            "COHORT_REDIS_URL",
            "COHORT_REPLICA_UID_BASE",
        )
    }
    assert leaked == set()
    assert not any("hunter2" in value or "agent-password" in value for value in env.values())
    assert env["JOB_SETTING"] == "on" and env["LC_MESSAGES"] == "C" and env["PATH"]
    assert env["HOME"] == str(layout.work_dir(node.data_dir, JOB + 2, 1, 0))
    assert env["TMPDIR"] == str(layout.tmp_dir(node.data_dir, JOB + 2))
    assert env["COHORT_CHECKPOINT_DIR"] == str(layout.checkpoint_dir(node.data_dir, JOB + 2))


def test_the_agent_ships_cleans_up_and_ends_what_a_job_left(node: Agent, bus: redis.Redis) -> None:
    job = JOB + 3
    node.start_replica(command_job(job, WRITER + LEAVER + "print('to the log', flush=True)"))
    assert exit_of(bus, job)["exit_code"] == 0
    daemon = int((layout.work_dir(node.data_dir, job, 1, 0) / "daemon.pid").read_text())
    # The daemon outlived the replica's process group: the agent ended it by its uid.
    deadline = time.monotonic() + 10
    while psutil.pid_exists(daemon) and psutil.Process(daemon).status() != "zombie":
        assert time.monotonic() < deadline, "the job's daemon still runs"
        time.sleep(0.1)
    uid = UID_BASE + job % UID_RANGE
    # (A zombie runs nothing: it waits for whoever adopted it to collect its status.)
    assert not [
        p
        for p in psutil.process_iter(["uids", "status"])
        if p.info["uids"].real == uid and p.info["status"] != psutil.STATUS_ZOMBIE
    ]
    # The agent read the replica's files as they are (owned by the job's uid, 0600) and
    # shipped them: the checkpoint and the log.
    store = open_store(settings=node.settings)
    with store.open_read(f"{keys.checkpoints_prefix(job)}/secret.ckpt") as handle:
        assert handle.read() == b"job A's weights"
    with store.open_read(keys.log_key(job, 1, 0)) as handle:
        assert b"to the log" in handle.read()
    # And removes the job's scratch, though its replicas own it.
    checkpoint = layout.checkpoint_dir(node.data_dir, job)
    assert (checkpoint / "secret.ckpt").is_file()
    node.cleanup_job(CleanupJob("isolation", job))
    assert not checkpoint.exists()
    # What stays (its log, here) is the agent's alone now: a later job with this uid
    # (a multiple of the uid range away) reads nothing of it.
    assert owner_and_mode(layout.job_dir(node.data_dir, job)) == (0, 0, 0o700)


# What a first job leaves in /tmp and /dev/shm, and writes beside its model directory (as
# TensorFlow's Keras tutorial writes a worker's copy of the model).
LITTERER = """import json, os
os.makedirs("/tmp/backup", exist_ok=True)
open("/tmp/backup/state", "w").write("job A")
open("/dev/shm/segment", "w").write("job A")
beside = os.path.join(os.path.dirname(os.environ["COHORT_MODEL_DIR"]), "workertemp_1")
os.makedirs(beside)
open(os.path.join(beside, "model"), "w").write("a worker's copy")
found = {"tmp": sorted(os.listdir("/tmp")), "shm": sorted(os.listdir("/dev/shm"))}
for name in ("logs", "inputs"):  # the agent's entries of the job's directory stay its own
    try:
        os.rename(os.path.join(os.environ["COHORT_JOB_DIR"], name),
                  os.path.join(os.environ["COHORT_JOB_DIR"], "taken"))
        found[name] = "renamed"
    except OSError as exc:
        found[name] = exc.strerror
# A link named as the next attempt's directory, to somewhere the agent would chown.
os.symlink("/etc", os.path.join(os.environ["COHORT_JOB_DIR"], "attempt-2"))
with open(os.path.join(os.environ["COHORT_WORK_DIR"], "found.json"), "w") as handle:
    json.dump(found, handle)
"""
# A second job (or attempt) looks for what the first left.
LOOKER = """import json, os
seen = {"backup": os.path.exists("/tmp/backup"), "shm": sorted(os.listdir("/dev/shm")),
        "uid": os.getuid()}
os.makedirs("/tmp/backup")  # the tutorial's BackupAndRestore directory, free again
with open(os.path.join(os.environ["COHORT_WORK_DIR"], "seen.json"), "w") as handle:
    json.dump(seen, handle)
"""


def test_each_replica_has_its_own_tmp_and_can_write_its_job_dir(
    node: Agent, bus: redis.Redis
) -> None:
    job = JOB + 2
    host_file = Path("/tmp") / f"cohort-host-{os.getpid()}"
    host_file.write_text("the node's")
    try:
        node.start_replica(command_job(job, LITTERER))
        done = exit_of(bus, job)
        assert done["exit_code"] == 0, done["log_tail"]
    finally:
        host_file.unlink()
    found = json.loads((layout.work_dir(node.data_dir, job, 1, 0) / "found.json").read_text())
    # Its /tmp held only what it wrote (and the paths it needs, bound back), not the node's.
    assert host_file.name not in found["tmp"] and "backup" in found["tmp"], found
    assert found["shm"] == ["segment"], found
    assert found["logs"] == found["inputs"] == "Operation not permitted", found
    job_dir = layout.job_dir(node.data_dir, job)
    assert (job_dir / "workertemp_1" / "model").read_text() == "a worker's copy"
    assert not Path("/tmp/backup/state").exists() and not Path("/dev/shm/segment").exists()
    etc = os.stat("/etc")
    # Its next attempt: the link it planted is replaced by the agent's directory, /etc
    # untouched, and /tmp is empty again.
    bus.set(attempt_key(job), 2)
    node.start_replica(
        StartReplica(
            "isolation",
            ReplicaSpec(job, 2, 0, 1, None, "one_device", {}, command=["python", "-c", LOOKER]),
        )
    )
    again = exit_of(bus, job, attempt=2)
    assert again["exit_code"] == 0, again["log_tail"]
    assert (os.stat("/etc").st_uid, os.stat("/etc").st_mode) == (etc.st_uid, etc.st_mode)
    assert not (job_dir / "attempt-2").is_symlink()
    seen = json.loads((layout.work_dir(node.data_dir, job, 2, 0) / "seen.json").read_text())
    assert seen == {"backup": False, "shm": [], "uid": UID_BASE + job % UID_RANGE}
