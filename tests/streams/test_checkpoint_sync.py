"""A job's checkpoint directory mirrored to the artifact store and restored on another node,
against a directory store and a real S3 server (moto's standalone server): the files
TensorFlow's CheckpointManager and tf-keras' BackupAndRestore lay out (real TensorFlow
saving while the mirror syncs: tests/workers/test_checkpoint_restore.py)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import redis

from services.settings import Settings
from services.storage.store import ArtifactStore, open_store
from services.telemetry.metrics import parse_batch
from services.wire.keys import METRICS_STREAM, attempt_key
from services.wire.replica import ReplicaSpec
from tests.e2e.conftest import wait_for
from tests.tmpfs import small_tmpfs
from workers import layout
from workers.node.checkpoint_mirror import CheckpointMirror
from workers.node.checkpoint_names import is_scratch, named_checkpoints
from workers.node.launcher import ReplicaKey
from workers.node.sidecar import Sidecars

JOB = 41


def state(*names: str) -> bytes:
    """A CheckpointManager state file naming `names`, the newest first."""
    lines = [f'model_checkpoint_path: "{names[0]}"']
    lines += [f'all_model_checkpoint_paths: "{name}"' for name in reversed(names)]
    return ("\n".join(lines) + "\n").encode()


def save(root: Path, number: int, *, shards: int = 1, state_too: bool = True) -> None:
    """Checkpoint ckpt-<number> in root/chief as TensorFlow lays it out: data and index
    first, then the state file naming it."""
    chief = root / "chief"
    chief.mkdir(parents=True, exist_ok=True)
    for shard in range(shards):
        (chief / f"ckpt-{number}.data-{shard:05d}-of-{shards:05d}").write_bytes(
            bytes([number % 256]) * 1000
        )
    (chief / f"ckpt-{number}.index").write_bytes(b"index %d" % number)
    if state_too:
        (chief / "checkpoint").write_bytes(state(f"ckpt-{number}"))


def stored(store: ArtifactStore) -> dict[str, bytes]:
    prefix = f"jobs/{JOB}/checkpoints/"
    result = {}
    for key, _ in store.list(prefix):
        with store.open_read(key) as handle:
            result[key[len(prefix) :]] = handle.read()
    return result


def test_scratch_and_state_files_are_told_apart() -> None:
    assert is_scratch("workertemp_1/chief/ckpt-1.index")
    assert is_scratch("chief/ckpt-2_temp/part-00000-of-00001.data-00000-of-00001")
    assert is_scratch("chief/ckpt-2_temp_0a1b2c/part-00000-of-00001.index")
    assert is_scratch("chief/checkpoint.tmp" + "a" * 32)
    assert not is_scratch("chief/ckpt-2.data-00000-of-00001")
    assert not is_scratch("chief/checkpoint")
    assert named_checkpoints(state("ckpt-3", "ckpt-2")) == ["ckpt-3", "ckpt-2"]
    assert named_checkpoints(b'model_checkpoint_path: "/abs/dir/ckpt-7"\n') == ["ckpt-7"]


def test_the_chiefs_checkpoint_is_mirrored_and_never_a_partial_one(
    artifact_env: str, tmp_path: Path
) -> None:
    store = open_store(artifact_env)
    local = tmp_path / "node-a"
    mirror = CheckpointMirror(store, JOB, local)
    save(local, 1)
    (local / "workertemp_1").mkdir()
    (local / "workertemp_1" / "ckpt-1.index").write_bytes(b"a worker's scratch")
    (local / "chief" / "ckpt-2_temp").mkdir()
    (local / "chief" / "ckpt-2_temp" / "part-00000-of-00001.index").write_bytes(b"half")
    assert sorted(mirror.sync()) == [
        "chief/checkpoint",
        "chief/ckpt-1.data-00000-of-00001",
        "chief/ckpt-1.index",
    ]
    assert set(stored(store)) == {
        "chief/checkpoint",
        "chief/ckpt-1.data-00000-of-00001",
        "chief/ckpt-1.index",
    }
    assert mirror.sync() == []  # nothing changed, nothing sent

    # A state file naming a checkpoint whose shards are not all there yet is held back,
    # and the data the stored state file names is kept although it is gone here.
    save(local, 2, shards=2)
    (local / "chief" / "ckpt-2.data-00001-of-00002").unlink()
    for old in (local / "chief").glob("ckpt-1.*"):
        old.unlink()
    mirror.sync()
    held = stored(store)
    assert held["chief/checkpoint"] == state("ckpt-1")
    assert "chief/ckpt-1.data-00000-of-00001" in held and "chief/ckpt-1.index" in held

    # Once it is whole, the state file goes, and the checkpoint it replaced is deleted.
    (local / "chief" / "ckpt-2.data-00001-of-00002").write_bytes(b"\x02" * 1000)
    mirror.sync()
    assert set(stored(store)) == {
        "chief/checkpoint",
        "chief/ckpt-2.index",
        "chief/ckpt-2.data-00000-of-00002",
        "chief/ckpt-2.data-00001-of-00002",
    }
    assert stored(store)["chief/checkpoint"] == state("ckpt-2")


def test_another_node_restores_the_newest_checkpoint(artifact_env: str, tmp_path: Path) -> None:
    store = open_store(artifact_env)
    node_a, node_b = tmp_path / "node-a", tmp_path / "node-b"
    save(node_a, 4)
    CheckpointMirror(store, JOB, node_a).sync()

    # Node b ran an earlier attempt and holds an older checkpoint: it is replaced.
    save(node_b, 2)
    restored = CheckpointMirror(open_store(artifact_env), JOB, node_b).restore()
    assert restored[-1] == "chief/checkpoint"  # the state file last
    assert sorted(p.relative_to(node_b).as_posix() for p in node_b.rglob("*") if p.is_file()) == [
        "chief/checkpoint",
        "chief/ckpt-4.data-00000-of-00001",
        "chief/ckpt-4.index",
    ]
    assert (node_b / "chief" / "checkpoint").read_bytes() == state("ckpt-4")

    # The same checkpoint here: nothing is fetched. A newer one here: it is kept.
    assert CheckpointMirror(open_store(artifact_env), JOB, node_b).restore() == []
    save(node_a, 6)
    assert CheckpointMirror(open_store(artifact_env), JOB, node_a).restore() == []
    assert (node_a / "chief" / "checkpoint").read_bytes() == state("ckpt-6")
    # Unless the gang spans nodes: then every node takes the store's, the one all see.
    assert CheckpointMirror(open_store(artifact_env), JOB, node_a).restore(store_wins=True)
    assert (node_a / "chief" / "checkpoint").read_bytes() == state("ckpt-4")
    assert not (node_a / "chief" / "ckpt-6.index").exists()

    # A fresh node (another DATA_DIR): everything is fetched.
    fresh = tmp_path / "node-c"
    assert len(CheckpointMirror(open_store(artifact_env), JOB, fresh).restore()) == 3


def test_a_replica_without_the_stored_checkpoint_does_not_delete_it(
    artifact_env: str, tmp_path: Path
) -> None:
    store = open_store(artifact_env)
    save(tmp_path / "node-a", 3)
    CheckpointMirror(store, JOB, tmp_path / "node-a").sync()
    # Node b's restore failed; its replica starts over and writes nothing yet.
    empty = CheckpointMirror(open_store(artifact_env), JOB, tmp_path / "node-b")
    assert empty.sync() == []
    assert stored(store)["chief/checkpoint"] == state("ckpt-3")


def test_at_exit_a_replicas_files_reach_the_default_store_under_data_dir(
    bus: redis.Redis, tmp_path: Path
) -> None:
    settings = Settings(DATA_DIR=tmp_path / "data", ARTIFACT_URL="", NODE_ID="n1")
    data = settings.data_dir
    sidecars = Sidecars(settings, bus)
    for index in (1, 0):  # the worker exits first, then the chief
        key = ReplicaKey(JOB, 1, index)
        sidecars.prepare(
            ReplicaSpec(
                job_id=JOB,
                attempt=1,
                index=index,
                replicas=2,
                trainer="mlp_digits",
                strategy="multi_worker_mirrored",
            )
        )
        sidecars.follow(key)
        sidecars.start(key)
        save(layout.checkpoint_dir(data, JOB), 1)
        model = layout.model_dir(data, JOB)
        model.mkdir(parents=True, exist_ok=True)
        (model / "saved_model.pb").write_bytes(b"model of replica %d" % index)
        board = layout.tensorboard_dir(data, JOB, index)
        board.mkdir(parents=True, exist_ok=True)
        (board / "notes.txt").write_text(f"replica {index}")
        metrics = layout.metrics_file(data, JOB, 1, index)
        metrics.parent.mkdir(parents=True, exist_ok=True)
        metrics.write_text(json.dumps({"step": 3, "metrics": {"loss": 0.5 + index}}) + "\n")
        log = layout.log_file(data, JOB, 1, index)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"log of replica {index}\n")
        sidecars.finish(key, log, timeout=60)
        if index == 1:  # a worker's model and checkpoint are not the job's
            assert not open_store(settings=settings).list(f"jobs/{JOB}/model")
            assert not open_store(settings=settings).list(f"jobs/{JOB}/checkpoints")

    store = open_store(settings=settings)
    assert store.root == str(data / "artifacts")
    files = {key: store.open_read(key).read() for key, _ in store.list(f"jobs/{JOB}")}
    assert files[f"jobs/{JOB}/model/saved_model.pb"] == b"model of replica 0"
    assert files[f"jobs/{JOB}/checkpoints/chief/checkpoint"] == state("ckpt-1")
    for index in (0, 1):
        assert (
            files[f"jobs/{JOB}/tensorboard/replica-{index}/notes.txt"]
            == f"replica {index}".encode()
        )
        assert (
            files[f"jobs/{JOB}/logs/attempt-1/replica-{index}.log"]
            == f"log of replica {index}\n".encode()
        )
    # The points of both metrics files went out before finish() returned.
    rows = [row for _, fields in bus.xrange(METRICS_STREAM) for row in parse_batch(fields["data"])]
    assert {
        (r["replica"], r["step"], r["name"], r["value"]) for r in rows if r["job_id"] == JOB
    } == {(0, 3, "loss", 0.5), (1, 3, "loss", 1.5)}


def run_chief(sidecars: Sidecars, attempt: int) -> ReplicaKey:
    """Replica 0 of `attempt` (the job's only one) prepared, followed and started."""
    key = ReplicaKey(JOB, attempt, 0)
    sidecars.prepare(
        ReplicaSpec(
            job_id=JOB,
            attempt=attempt,
            index=0,
            replicas=1,
            trainer="mlp_digits",
            strategy="multi_worker_mirrored",
        )
    )
    sidecars.follow(key)
    sidecars.start(key)
    return key


def write_model(data: Path, text: bytes) -> None:
    model = layout.model_dir(data, JOB)
    model.mkdir(parents=True, exist_ok=True)
    (model / "saved_model.pb").write_bytes(text)


def test_an_attempt_no_longer_current_sends_nothing_over_the_jobs_checkpoint_or_model(
    bus: redis.Redis, artifact_env: str, tmp_path: Path
) -> None:
    """A chief that froze, or whose node was cut off, is torn down and its gang placed
    again on another node; when it comes back, its late checkpoints and model must not
    replace the ones attempt 2 trains from and produced."""
    node_a = Sidecars(
        Settings(DATA_DIR=tmp_path / "a", ARTIFACT_URL=artifact_env, NODE_ID="a"), bus
    )
    node_b = Sidecars(
        Settings(DATA_DIR=tmp_path / "b", ARTIFACT_URL=artifact_env, NODE_ID="b"), bus
    )
    store = open_store(artifact_env)
    bus.set(attempt_key(JOB), 1)
    first = run_chief(node_a, 1)
    save(layout.checkpoint_dir(tmp_path / "a", JOB), 1)
    wait_for(
        lambda: stored(store).get("chief/checkpoint") == state("ckpt-1"),
        20,
        "attempt 1's checkpoint in the store",
    )

    # Attempt 1 torn down (its chief frozen); attempt 2 placed on node b, from ckpt-1.
    bus.set(attempt_key(JOB), 2)
    second = run_chief(node_b, 2)
    assert (
        layout.checkpoint_dir(tmp_path / "b", JOB) / "chief" / "checkpoint"
    ).read_bytes() == state("ckpt-1")
    save(layout.checkpoint_dir(tmp_path / "b", JOB), 2)
    write_model(tmp_path / "b", b"attempt 2's model")
    node_b.finish(second, tmp_path / "b" / "no.log", timeout=60)

    # Attempt 1 thaws: it saves on (its syncer still polls), then exits.
    save(layout.checkpoint_dir(tmp_path / "a", JOB), 7)
    write_model(tmp_path / "a", b"attempt 1's late model")
    node_a.finish(first, tmp_path / "a" / "no.log", timeout=60)

    files = stored(store)
    assert files["chief/checkpoint"] == state("ckpt-2")
    assert not any(rel.startswith("chief/ckpt-7") for rel in files), sorted(files)
    with store.open_read(f"jobs/{JOB}/model/saved_model.pb") as handle:
        assert handle.read() == b"attempt 2's model"


def test_a_chief_that_cannot_learn_whether_its_attempt_is_current_sends_nothing(
    artifact_env: str, tmp_path: Path
) -> None:
    """Redis out of reach at the exit, as from a node cut off (whose store may come back
    first): its last checkpoint and model wait for an answer, at most the upload timeout,
    then are not sent."""
    unreachable = redis.Redis(host="127.0.0.1", port=9, socket_connect_timeout=0.2)
    node = Sidecars(
        Settings(DATA_DIR=tmp_path / "a", ARTIFACT_URL=artifact_env, NODE_ID="a"), unreachable
    )
    key = run_chief(node, 1)
    save(layout.checkpoint_dir(tmp_path / "a", JOB), 3)
    write_model(tmp_path / "a", b"a model")
    node.finish(key, tmp_path / "a" / "no.log", timeout=2)
    store = open_store(artifact_env)
    assert stored(store) == {}
    assert not store.list(f"jobs/{JOB}/model")


def test_a_restore_cut_off_by_a_full_disk_leaves_no_mixed_checkpoint(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    # Another node's ckpt-3 (a save of its own under the same number) is in the store,
    # its index larger than what is left on this node's disk.
    other = tmp_path / "node-a" / "chief"
    other.mkdir(parents=True)
    (other / "ckpt-3.data-00000-of-00001").write_bytes(b"\xaa" * 2000)
    (other / "ckpt-3.index").write_bytes(b"\xbb" * 200_000)
    (other / "checkpoint").write_bytes(state("ckpt-3"))
    CheckpointMirror(store, JOB, other.parent).sync()
    before = stored(store)

    with small_tmpfs(tmp_path / "node-b", 128 * 1024) as local:
        # This node's own ckpt-3 (and the ckpt-2 before it), which its state file names.
        save(local, 2)
        save(local, 3)
        (local / "chief" / "checkpoint").write_bytes(state("ckpt-3", "ckpt-2"))
        mirror = CheckpointMirror(open_store(str(tmp_path / "store")), JOB, local)
        # A gang over several nodes takes the store's: the data file is replaced, then
        # the index does not fit.
        with pytest.raises(OSError) as cut_off:
            mirror.restore(store_wins=True)
        assert cut_off.value.errno == errno.ENOSPC
        left = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
        # No state file naming a checkpoint half from each save, and no scratch.
        assert left == [], left
        # Nothing of it goes back over the store's checkpoint, which stays whole.
        assert mirror.sync() == []
        assert stored(store) == before


def test_a_trainer_saving_faster_than_a_sync_takes_still_gets_its_checkpoints_stored(
    tmp_path: Path,
) -> None:
    """BackupAndRestore keeps one checkpoint: a trainer that saves every few milliseconds
    while the mirror's walk of a big tree takes tens (a busy node, a slow agent) has
    rotated out, by the time they are listed, the files the state file read at the sync's
    start names. Each sync must still store a whole checkpoint: until 2026-11-28 none did
    (0 of 15 here), and a job that ran to its end stored no checkpoint at all (its
    BackupAndRestore deletes the directory at the end)."""
    import os
    import threading

    store = open_store(str(tmp_path / "store"))
    local = tmp_path / "node"
    chief, assets = local / "chief", local / "assets"
    chief.mkdir(parents=True)
    assets.mkdir()
    for i in range(3000):  # what makes a walk of the tree slower than a save
        (assets / f"f{i}").write_bytes(b"x")
    mirror = CheckpointMirror(store, JOB, local)
    mirror.sync()
    stop = threading.Event()

    def trainer() -> None:
        number = 0
        while not stop.is_set():
            number += 1
            save(local, number, state_too=False)
            aside = chief / "checkpoint.tmp"
            aside.write_bytes(state(f"ckpt-{number}"))
            os.replace(aside, chief / "checkpoint")
            for old in chief.glob(f"ckpt-{number - 1}.*"):
                old.unlink()
            stop.wait(0.003)

    saving = threading.Thread(target=trainer)
    saving.start()
    states_sent = 0
    try:
        for _ in range(15):
            stop.wait(0.05)
            states_sent += "chief/checkpoint" in mirror.sync()
    finally:
        stop.set()
        saving.join()
    assert states_sent >= 5, f"only {states_sent} of 15 syncs stored a whole checkpoint"
    # What the store holds is one whole checkpoint: the one its state file names.
    held = stored(store)
    (name,) = named_checkpoints(held["chief/checkpoint"])[:1]
    number = int(name.removeprefix("ckpt-"))
    assert held[f"chief/{name}.index"] == b"index %d" % number
    assert held[f"chief/{name}.data-00000-of-00001"] == bytes([number % 256]) * 1000
