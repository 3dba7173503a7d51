"""The agent with a code bundle, for real (processes, a local artifact store, Redis; no
TensorFlow): the task returns at once while the bundle is fetched, the command runs in its
own copy of the code with the contract's environment, a stop during the fetch starts
nothing, a bundle whose bytes do not match its digest is refused with the reason, and one
fetched onto a full DATA_DIR is refused as such, leaving nothing half-written in the cache."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cohort.bundles import pack
from services.exit_codes import NO_SPACE, NO_SPACE_REASON, describe
from services.settings import Settings
from services.storage.keys import bundle_key
from services.storage.store import ArtifactStore, open_store
from services.wire.keys import EVENTS_STREAM, attempt_key, claim_key
from services.wire.replica import ReplicaSpec, StartReplica, StopReplica
from tests.conftest import redis_url
from tests.tmpfs import fill, small_tmpfs
from workers import layout
from workers.node.agent import Agent
from workers.node.launcher import ReplicaKey

JOB = 990_301
# Writes what the process got (its cwd and environment) next to itself, then exits 0.
SCRIPT = """import json, os, sys
with open("seen.json", "w") as handle:
    json.dump({"cwd": os.getcwd(), "env": dict(os.environ), "argv": sys.argv}, handle)
"""


class GatedStore(ArtifactStore):
    """The real local store, whose downloads wait until the test opens the gate."""

    def __init__(self, inner: ArtifactStore) -> None:
        super().__init__(inner.fs, inner.root, url=inner.url)
        self.fetching = threading.Event()
        self.gate = threading.Event()

    def get_file(self, key: str, dest_path: str | os.PathLike[str]) -> None:
        self.fetching.set()
        self.gate.wait(30)
        super().get_file(key, dest_path)


@pytest.fixture
def bus() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url("agent"), decode_responses=True)
    client.delete(
        *(attempt_key(job) for job in range(JOB, JOB + 6)),
        *(claim_key(job, 1, i) for job in range(JOB, JOB + 6) for i in (0, 1)),
    )
    # The stream is shared with other tests of the agent (and earlier runs): each test
    # reads only what came after its start.
    newest = client.xrevrange(EVENTS_STREAM, count=1)
    _since[:] = [str(newest[0][0]) if newest else "0-0"]
    yield client
    client.close()


_since: list[str] = ["0-0"]


@pytest.fixture
def node(tmp_path: Path, bus: redis.Redis) -> Iterator[Agent]:
    agent = Agent(
        Settings(
            DATA_DIR=tmp_path / "data",
            NODE_ID="bundles",
            NODE_KEY="ab" * 32,
            ARTIFACT_URL=str(tmp_path / "store"),
        ),
        bus,
    )
    yield agent
    agent.shutdown(grace=2)


def upload(node: Agent, tmp_path: Path) -> str:
    tree = tmp_path / "code"
    tree.mkdir()
    (tree / "run.py").write_text(SCRIPT)
    info = pack(tree, tmp_path / "code.tar.gz")
    open_store(settings=node.settings).put_file(bundle_key(info.digest), tmp_path / "code.tar.gz")
    return info.digest


def start(job_id: int, digest: str, index: int = 0, replicas: int = 1) -> StartReplica:
    spec = ReplicaSpec(
        job_id,
        1,
        index,
        replicas,
        None,
        "one_device",
        {"nested": {"a": [1]}},
        bundle=digest,
        command=["python", "run.py", "--x"],
        env={"MY_SETTING": "on"},
    )
    return StartReplica("bundles", spec)


def events(client: redis.Redis, job_id: int) -> list[dict[str, Any]]:
    found = []
    for _, fields in client.xrange(EVENTS_STREAM, min=f"({_since[0]}"):
        data = json.loads(fields["data"])
        if data.get("job_id") == job_id:
            found.append({"kind": fields["kind"], **data})
    return found


def exits(
    client: redis.Redis, job_id: int, count: int = 1, timeout: float = 30
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [e for e in events(client, job_id) if e["kind"] == "replica_exited"]
        if len(done) >= count:
            return done
        time.sleep(0.1)
    raise AssertionError(f"no {count} exits of job {job_id}: {events(client, job_id)}")


def test_a_command_runs_in_its_own_copy_of_the_bundle(
    node: Agent, tmp_path: Path, bus: redis.Redis
) -> None:
    digest = upload(node, tmp_path)
    for index in (0, 1):
        node.start_replica(start(JOB, digest, index, replicas=2))
    assert sorted(e["exit_code"] for e in exits(bus, JOB, 2)) == [0, 0]
    for index in (0, 1):
        code = layout.code_dir(node.data_dir, JOB, 1, index)
        seen = json.loads((code / "seen.json").read_text())
        assert seen["cwd"] == str(code) and seen["argv"][1:] == ["--x"]
        env = seen["env"]
        assert env["MY_SETTING"] == "on" and env["COHORT_REPLICA_INDEX"] == str(index)
        assert "COHORT_REDIS_URL" not in env and "COHORT_REPLICA_SPEC" not in env
        assert json.loads(Path(env["COHORT_HYPERPARAMETERS"]).read_text()) == {"nested": {"a": [1]}}
    # Each replica's copy was unpacked from the verified archive, the one thing cached:
    # no tree the agent unpacked (as root) is kept to copy from.
    cache = layout.bundle_cache_dir(node.data_dir)
    hex_digest = digest.removeprefix("sha256:")
    assert (cache / f"{hex_digest}.tar.gz").is_file() and not (cache / hex_digest).exists()


def test_a_stop_during_the_fetch_starts_nothing(
    node: Agent, tmp_path: Path, bus: redis.Redis
) -> None:
    digest = upload(node, tmp_path)
    store = GatedStore(open_store(settings=node.settings))
    node.preparer._open()  # the agent's store, slowed: a big bundle on a slow network
    node.preparer._cache.store = store  # type: ignore[union-attr]
    began = time.monotonic()
    node.start_replica(start(JOB + 1, digest))
    assert time.monotonic() - began < 1.0  # the task returned; the fetch goes on
    assert store.fetching.wait(10)
    node.stop_replica(StopReplica("bundles", JOB + 1, 1, 0, grace_seconds=1))
    store.gate.set()
    (stopped,) = exits(bus, JOB + 1)
    assert stopped["exit_code"] == 143 and stopped["never_started"]
    time.sleep(0.5)
    assert node.processes == {} and node.preparing == {}
    assert not any(e["kind"] == "replica_started" for e in events(bus, JOB + 1))
    assert not (layout.spec_file(node.data_dir, JOB + 1, 1, 0)).exists()


def test_a_bundle_that_does_not_match_its_digest_is_refused(
    node: Agent, tmp_path: Path, bus: redis.Redis
) -> None:
    upload(node, tmp_path)
    forged = "sha256:" + hashlib.sha256(b"other bytes").hexdigest()
    open_store(settings=node.settings).put_file(bundle_key(forged), tmp_path / "code.tar.gz")
    node.start_replica(start(JOB + 2, forged))
    (refused,) = exits(bus, JOB + 2)
    assert refused["never_started"] and refused["exit_code"] == 126
    assert "does not match its digest" in refused["log_tail"]
    assert node.exited[ReplicaKey(JOB + 2, 1, 0)][0] == 126


def test_a_missing_bundle_is_refused_with_the_reason(node: Agent, bus: redis.Redis) -> None:
    node.start_replica(start(JOB + 3, "sha256:" + "ab" * 32))
    (refused,) = exits(bus, JOB + 3)
    assert refused["never_started"] and "is not in the artifact store" in refused["log_tail"]


def test_a_bundle_fetched_onto_a_full_data_dir_is_refused_for_want_of_space(
    tmp_path: Path, bus: redis.Redis
) -> None:
    with small_tmpfs(tmp_path / "disk", 2**20) as disk:
        node = Agent(
            Settings(
                DATA_DIR=disk,
                NODE_ID="bundles",
                NODE_KEY="ab" * 32,
                ARTIFACT_URL=str(tmp_path / "store"),
            ),
            bus,
        )
        try:
            digest = upload(node, tmp_path)
            filler = fill(disk)
            node.start_replica(start(JOB + 4, digest))
            (refused,) = exits(bus, JOB + 4)
            # Retryable, and named: another attempt may find the space.
            assert refused["never_started"] and refused["exit_code"] == NO_SPACE, refused
            assert NO_SPACE_REASON in describe(refused["exit_code"])
            assert "could not fetch the job's code" in refused["log_tail"], refused
            cache = layout.bundle_cache_dir(disk)
            # No half-fetched archive or half-unpacked tree (only the digest's lock file).
            assert [p.name for p in cache.iterdir() if not p.name.endswith(".lock")] == []
            # The agent took it in its stride: with space again, the same bundle runs.
            filler.unlink()
            node.start_replica(start(JOB + 5, digest))
            (ran,) = exits(bus, JOB + 5)
            assert ran["exit_code"] == 0, ran
        finally:
            node.shutdown(grace=2)
