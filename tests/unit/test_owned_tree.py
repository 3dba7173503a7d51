"""Reading a tree a replica writes (services/storage/owned_tree.py) on a real filesystem:
regular files of the tree's owner are read; a link (to a file or a directory, in place of
a file or of a directory on the way, swapped in after the listing), a fifo (without
hanging) and another user's file (a hard link to root's, as root) are refused and said.
The uploads and followers built on it send and read nothing of them, and a restore writes
and deletes nothing through a link."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from services.storage.owned_tree import OwnedTree, Refused
from services.storage.store import open_store
from workers import layout
from workers.node.checkpoint_mirror import CheckpointMirror
from workers.node.report_shipper import MetricsFileReader
from workers.node.sidecar import LogNotes
from workers.node.tfevents import EventFileReader

OTHER_UID = 1_930_000_017  # a uid no one on the machine has
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the tree with a secret in it."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret").write_bytes(b"the node's secret")
    (directory / "sub").mkdir()
    (directory / "sub" / "f").write_bytes(b"the node's secret too")
    return directory


@pytest.fixture
def tree_dir(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "chief").mkdir(parents=True)
    (root / "chief" / "ckpt-1.index").write_bytes(b"index")
    (root / "top").write_bytes(b"top")
    return root


def skips() -> tuple[list[tuple[str, str]], Callable[[str, str], None]]:
    said: list[tuple[str, str]] = []
    return said, lambda rel, why: said.append((rel, why))


def within(seconds: float, call: Callable[[], Any]) -> Any:
    """`call()`'s result, failing if it takes longer than `seconds` (a fifo that hangs)."""
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still blocked after {seconds}s"
    return result[0]


def test_regular_files_are_listed_and_read(tree_dir: Path) -> None:
    said, on_skip = skips()
    tree = OwnedTree(tree_dir, on_skip=on_skip)
    assert sorted(tree.files()) == ["chief/ckpt-1.index", "top"]
    assert tree.read_bytes("chief/ckpt-1.index") == b"index"
    assert os.fspath(tree) == str(tree_dir)
    assert said == []
    assert OwnedTree(tree_dir / "missing").files() == {}


def test_a_link_is_neither_listed_nor_read(tree_dir: Path, outside: Path) -> None:
    (tree_dir / "k").symlink_to(outside / "secret")
    (tree_dir / "chief" / "d").symlink_to(outside / "sub")
    said, on_skip = skips()
    tree = OwnedTree(tree_dir, on_skip=on_skip)
    assert sorted(tree.files()) == ["chief/ckpt-1.index", "top"]
    assert sorted(said) == [("chief/d", "a symbolic link"), ("k", "a symbolic link")]
    for rel in ("k", "chief/d/f"):
        with pytest.raises(Refused):
            tree.open(rel)
        assert tree.read_bytes(rel) is None
    with pytest.raises(ValueError):
        tree.open("chief/../top")


def test_a_directory_swapped_for_a_link_after_the_listing_is_not_followed(
    tree_dir: Path, outside: Path, tmp_path: Path
) -> None:
    (tree_dir / "chief" / "sub").mkdir()
    (tree_dir / "chief" / "sub" / "f").write_bytes(b"the job's")
    said, on_skip = skips()
    tree = OwnedTree(tree_dir, on_skip=on_skip)
    assert "chief/sub/f" in tree.files()
    # Between the walk and the read, the replica renames a link over each directory.
    for name, target in (("chief/sub", outside / "sub"), ("chief", outside)):
        (tree_dir / name).rename(tmp_path / f"moved-{name.replace('/', '-')}")
        (tree_dir / name).symlink_to(target)
    assert (tree_dir / "chief" / "sub" / "f").read_bytes() == b"the node's secret too"
    with pytest.raises(Refused):
        tree.open("chief/sub/f")
    assert tree.read_bytes("chief/ckpt-1.index") is None
    assert ("chief/sub/f", "a symbolic link (or lies under one)") in said


def test_a_directory_swapped_for_a_link_during_the_walk_is_not_entered(
    tree_dir: Path, outside: Path, tmp_path: Path
) -> None:
    class Swapped(OwnedTree):
        """The replica renames a link over `chief` between its lstat and its open."""

        def _enter(
            self, fd: int, name: str, rel: str, owner: int, found: dict[str, os.stat_result]
        ) -> None:
            if rel == "chief":
                (tree_dir / "chief").rename(tmp_path / "moved")
                (tree_dir / "chief").symlink_to(outside)
            super()._enter(fd, name, rel, owner, found)

    said, on_skip = skips()
    assert sorted(Swapped(tree_dir, on_skip=on_skip).files()) == ["top"]
    assert said == [("chief", "a symbolic link")]


def test_a_fifo_is_refused_without_hanging(tree_dir: Path) -> None:
    os.mkfifo(tree_dir / "pipe")
    said, on_skip = skips()
    tree = OwnedTree(tree_dir, on_skip=on_skip)
    assert "pipe" not in tree.files()
    assert said == [("pipe", "a fifo")]
    assert within(5, lambda: tree.read_bytes("pipe")) is None
    assert ("pipe", "a fifo") in said[1:]
    # The followers of a replica's metrics and event files do not hang on one either.
    os.mkfifo(tree_dir / "metrics.jsonl")
    assert within(5, lambda: MetricsFileReader(tree_dir / "metrics.jsonl").read()) == []
    os.mkfifo(tree_dir / "events.out.tfevents.1")
    reader = EventFileReader(tree_dir / "events.out.tfevents.1", tree=OwnedTree(tree_dir))
    assert within(5, reader.read) == []


@as_root
def test_another_users_file_is_refused(tree_dir: Path) -> None:
    os.chown(tree_dir / "top", OTHER_UID, OTHER_UID)
    said, on_skip = skips()
    tree = OwnedTree(tree_dir, on_skip=on_skip)  # the root's owner: root, here
    assert sorted(tree.files()) == ["chief/ckpt-1.index"]
    with pytest.raises(Refused):
        tree.open("top")
    assert said[0] == ("top", f"owned by uid {OTHER_UID}, not the job's")


@as_root
def test_a_hard_link_to_roots_file_in_the_jobs_tree_is_refused(
    tree_dir: Path, outside: Path
) -> None:
    # The job's tree, as isolation.lay_out makes it: the directory and files the job's.
    for path in (
        tree_dir,
        tree_dir / "chief",
        tree_dir / "chief" / "ckpt-1.index",
        tree_dir / "top",
    ):
        os.chown(path, OTHER_UID, OTHER_UID)
    os.link(outside / "secret", tree_dir / "k")  # root's file, under a name of the job's
    said, on_skip = skips()
    tree = OwnedTree(tree_dir, on_skip=on_skip)
    assert sorted(tree.files()) == ["chief/ckpt-1.index", "top"]
    assert tree.read_bytes("k") is None
    assert tree.read_bytes("top") == b"top"
    assert OwnedTree(tree_dir, owner=0).read_bytes("top") is None  # an explicit owner
    assert ("k", "owned by uid 0, not the job's") in said


def test_the_mirror_sends_the_regular_files_only_and_says_what_it_skipped(
    tmp_path: Path, outside: Path
) -> None:
    local = tmp_path / "checkpoints"
    (local / "chief").mkdir(parents=True)
    (local / "chief" / "ckpt-1.index").write_bytes(b"index")
    (local / "chief" / "ckpt-1.data-00000-of-00001").write_bytes(b"data")
    (local / "chief" / "checkpoint").symlink_to(outside / "secret")
    (local / "k").symlink_to(outside / "secret")
    os.mkfifo(local / "pipe")
    store = open_store(str(tmp_path / "store"))
    said, on_skip = skips()
    sent = within(30, lambda: CheckpointMirror(store, 7, local).sync(on_skip))
    assert sorted(sent) == ["chief/ckpt-1.data-00000-of-00001", "chief/ckpt-1.index"]
    assert {rel for rel, _ in said} == {"chief/checkpoint", "k", "pipe"}
    for key, _ in store.list(""):
        with store.open_read(key) as handle:
            assert b"secret" not in handle.read(), key
    # A model or TensorBoard upload through the same tree sends no more.
    model = store.put_tree("jobs/7/model", OwnedTree(local, on_skip=on_skip), mirror=True)
    assert sorted(model) == ["chief/ckpt-1.data-00000-of-00001", "chief/ckpt-1.index"]


def test_the_jobs_log_says_each_skipped_file_once_by_its_path_in_the_job(tmp_path: Path) -> None:
    data = tmp_path / "data"
    log_path = layout.log_file(data, 3, 1, 0)
    log_path.parent.mkdir(parents=True)
    log_path.write_text("the replica's own line\n")
    notes = LogNotes(log_path, layout.job_dir(data, 3))
    on_skip = notes.skipper(layout.checkpoint_dir(data, 3))
    for _ in range(3):  # a sync every second
        on_skip("k", "a symbolic link")
    notes.skipper(layout.tensorboard_dir(data, 3, 0))("train/pipe", "a fifo")
    lines = log_path.read_text().splitlines()
    assert lines[0] == "the replica's own line"
    assert lines[1].startswith("cohort agent: checkpoints/k is not uploaded: a symbolic link")
    assert lines[2].startswith(
        "cohort agent: tensorboard/replica-0/train/pipe is not uploaded: a fifo"
    )
    assert len(lines) == 3
    assert str(tmp_path) not in log_path.read_text()


def test_a_restore_never_writes_or_deletes_through_a_link(tmp_path: Path, outside: Path) -> None:
    # The store holds the job's checkpoint; here its directory `chief` is a link the
    # replica left, to a directory the agent must not write in.
    node_a, node_b = tmp_path / "a", tmp_path / "b"
    (node_a / "chief").mkdir(parents=True)
    (node_a / "chief" / "ckpt-1.index").write_bytes(b"index")
    (node_a / "chief" / "ckpt-1.data-00000-of-00001").write_bytes(b"data")
    (node_a / "chief" / "checkpoint").write_bytes(b'model_checkpoint_path: "ckpt-1"\n')
    store = open_store(str(tmp_path / "store"))
    CheckpointMirror(store, 9, node_a).sync()
    node_b.mkdir()
    (node_b / "chief").symlink_to(outside)
    (node_b / "old").mkdir()
    (node_b / "old" / "ckpt-0.index").write_bytes(b"an older attempt's")
    before = sorted(p.name for p in outside.rglob("*"))
    with pytest.raises(OSError):
        CheckpointMirror(open_store(str(tmp_path / "store")), 9, node_b).restore()
    assert sorted(p.name for p in outside.rglob("*")) == before
    assert (outside / "secret").read_bytes() == b"the node's secret"
    # Once the link is gone, the same restore writes the checkpoint, deleting what the
    # older attempt left, but not through a link put in its place meanwhile.
    (node_b / "chief").unlink()
    tree = OwnedTree(node_b)
    tree.unlink("old/ckpt-0.index/x")  # under a file: nothing to remove, no error
    written = CheckpointMirror(open_store(str(tmp_path / "store")), 9, node_b).restore()
    assert written[-1] == "chief/checkpoint"
    assert tree.read_bytes("chief/ckpt-1.index") == b"index"
    assert not (node_b / "old" / "ckpt-0.index").exists()
    (node_b / "old").rmdir()
    (node_b / "old").symlink_to(outside)
    tree.unlink("old/secret")
    assert (outside / "secret").exists()


def test_an_append_adds_to_the_file_itself_and_never_through_a_link(
    tree_dir: Path, outside: Path
) -> None:
    tree = OwnedTree(tree_dir)
    before = (tree_dir / "top").stat().st_ino
    after = tree.append("top", lambda out: out.write(b" and more"))
    assert (tree_dir / "top").read_bytes() == b"top and more"
    assert after.st_ino == before and after.st_size == len(b"top and more")  # in place
    (tree_dir / "k").symlink_to(outside / "secret")
    (tree_dir / "chief" / "d").symlink_to(outside / "sub")
    os.mkfifo(tree_dir / "fifo")

    def refused(rel: str) -> bool:
        try:
            tree.append(rel, lambda out: out.write(b"x"))
        except Refused:
            return True
        return False

    for rel in ("k", "chief/d/f", "fifo"):
        assert within(5, lambda rel=rel: refused(rel)), rel  # a fifo: without hanging
    with pytest.raises(FileNotFoundError):
        tree.append("missing", lambda out: out.write(b"x"))
    with pytest.raises(IsADirectoryError):
        tree.append("chief", lambda out: out.write(b"x"))
    assert (outside / "secret").read_bytes() == b"the node's secret"
    assert (outside / "sub" / "f").read_bytes() == b"the node's secret too"
