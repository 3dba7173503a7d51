"""The artifact store, the same tests against a local directory and a real S3 server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.settings import get_settings
from services.storage import keys
from services.storage.store import ArtifactStore, open_store


@pytest.fixture
def store(artifact_env: str) -> ArtifactStore:
    # Opened the way every process opens it: from the settings the environment gives.
    opened = open_store()
    assert opened.url == artifact_env
    return opened


def test_bytes_round_trip_with_exists_size_and_streaming_read(store: ArtifactStore) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    store.put_bytes("jobs/1/model/weights.bin", data)
    assert store.exists("jobs/1/model/weights.bin")
    assert not store.exists("jobs/1/model")  # a directory is not an object
    assert store.size("jobs/1/model/weights.bin") == len(data)
    read = bytearray()
    with store.open_read("jobs/1/model/weights.bin") as handle:
        while chunk := handle.read(64 * 1024):
            assert len(chunk) <= 64 * 1024
            read += chunk
    assert bytes(read) == data


def test_files_round_trip_and_a_missing_key_is_file_not_found(
    store: ArtifactStore, tmp_path: Path
) -> None:
    source = tmp_path / "source.txt"
    source.write_text("hello")
    store.put_file("bundles/x.tar.gz", source)
    store.get_file("bundles/x.tar.gz", tmp_path / "out" / "copy.txt")
    assert (tmp_path / "out" / "copy.txt").read_text() == "hello"
    assert os.listdir(tmp_path / "out") == ["copy.txt"]  # no temporary left beside it
    with pytest.raises(FileNotFoundError):
        store.get_file("bundles/missing.tar.gz", tmp_path / "never")
    with pytest.raises(FileNotFoundError):
        store.size("bundles/missing.tar.gz")
    with pytest.raises(FileNotFoundError):
        store.open_read("bundles/missing.tar.gz")
    assert not (tmp_path / "never").exists()


def test_list_is_by_directory_so_job_1_does_not_list_job_10(store: ArtifactStore) -> None:
    store.put_bytes("jobs/1/model/a", b"a")
    store.put_bytes("jobs/1/logs/attempt-1/replica-0.log", b"log")
    store.put_bytes("jobs/10/model/b", b"bb")
    assert store.list("jobs/1") == [
        ("jobs/1/logs/attempt-1/replica-0.log", 3),
        ("jobs/1/model/a", 1),
    ]
    assert store.list("jobs/1/") == store.list("jobs/1")
    assert store.list("jobs/10") == [("jobs/10/model/b", 2)]
    assert store.list("jobs/2") == []
    assert [key for key, _ in store.list()] == [
        "jobs/1/logs/attempt-1/replica-0.log",
        "jobs/1/model/a",
        "jobs/10/model/b",
    ]


def test_delete_prefix_deletes_that_prefix_only_and_never_everything(store: ArtifactStore) -> None:
    store.put_bytes("jobs/1/model/a", b"a")
    store.put_bytes("jobs/10/model/b", b"b")
    store.delete_prefix("jobs/1")
    assert store.list("jobs") == [("jobs/10/model/b", 1)]
    store.delete_prefix("jobs/1")  # nothing there: no error
    with pytest.raises(ValueError):
        store.delete_prefix("")


@pytest.mark.parametrize(
    "key",
    [
        "../x",
        "/etc/passwd",
        "jobs/../../x",
        "jobs//x",
        "jobs/./x",
        "",
        "a\\b",
        "a/\x00",
        ".partial/x",
    ],
)
def test_keys_that_could_leave_the_root_are_refused(store: ArtifactStore, key: str) -> None:
    with pytest.raises(ValueError):
        store.put_bytes(key, b"x")
    with pytest.raises(ValueError):
        store.open_read(key)


def test_put_tree_uploads_new_and_changed_files_only_and_mirrors_deletes(
    store: ArtifactStore, tmp_path: Path
) -> None:
    local = tmp_path / "ckpt"
    (local / "sub").mkdir(parents=True)
    (local / "checkpoint").write_text("step 1")
    (local / "sub" / "data-0").write_bytes(b"0" * 100)
    assert sorted(store.put_tree("jobs/5/checkpoints", local)) == ["checkpoint", "sub/data-0"]
    assert store.put_tree("jobs/5/checkpoints", local) == []
    # Rewritten in the second of its upload, same size: S3's whole-second times cannot
    # tell, the store's record of what it sent can.
    (local / "checkpoint").write_text("step 2")
    (local / "sub" / "data-1").write_bytes(b"1")
    (local / "sub" / "data-0").unlink()
    assert sorted(store.put_tree("jobs/5/checkpoints", local, mirror=True)) == [
        "checkpoint",
        "sub/data-1",
    ]
    assert store.list("jobs/5/checkpoints") == [
        ("jobs/5/checkpoints/checkpoint", 6),
        ("jobs/5/checkpoints/sub/data-1", 1),
    ]
    with store.open_read("jobs/5/checkpoints/checkpoint") as handle:
        assert handle.read() == b"step 2"


def test_get_tree_fetches_what_is_missing_or_changed_and_a_round_trip_uploads_nothing(
    store: ArtifactStore, tmp_path: Path
) -> None:
    store.put_bytes("jobs/6/checkpoints/checkpoint", b"one")
    store.put_bytes("jobs/6/checkpoints/sub/data", b"22")
    restored = tmp_path / "restored"
    assert sorted(store.get_tree("jobs/6/checkpoints", restored)) == ["checkpoint", "sub/data"]
    assert (restored / "sub" / "data").read_bytes() == b"22"
    assert store.get_tree("jobs/6/checkpoints", restored) == []
    # The restored directory, synced back as training goes on, sends only new files.
    assert store.put_tree("jobs/6/checkpoints", restored) == []
    (restored / "stale").write_text("x")
    store.put_bytes("jobs/6/checkpoints/sub/data", b"333")
    assert store.get_tree("jobs/6/checkpoints", restored, mirror=True) == ["sub/data"]
    assert not (restored / "stale").exists()
    assert (restored / "sub" / "data").read_bytes() == b"333"
    # Rewritten in the same second with the same size: its version tells.
    store.put_bytes("jobs/6/checkpoints/sub/data", b"444")
    assert store.get_tree("jobs/6/checkpoints", restored) == ["sub/data"]
    assert (restored / "sub" / "data").read_bytes() == b"444"


def test_versions_change_with_every_write(store: ArtifactStore) -> None:
    store.put_bytes("jobs/8/model/a", b"one")
    [(key, size, first)] = store.list_versions("jobs/8")
    assert (key, size) == ("jobs/8/model/a", 3)
    store.put_bytes("jobs/8/model/a", b"two")  # same size, same second
    assert store.list_versions("jobs/8")[0][2] != first


def test_default_store_is_a_directory_under_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COHORT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("COHORT_ARTIFACT_URL", raising=False)
    get_settings.cache_clear()
    try:
        store = open_store()
        store.put_bytes(keys.bundle_key("ab" * 32), b"x")
        assert (tmp_path / "data" / "artifacts" / "bundles" / f"{'ab' * 32}.tar.gz").is_file()
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()


def test_layout_keys() -> None:
    digest = "sha256:" + "AB" * 32
    assert keys.bundle_key(digest) == f"bundles/{'ab' * 32}.tar.gz"
    assert keys.bundle_key("cd" * 32) == f"bundles/{'cd' * 32}.tar.gz"
    with pytest.raises(ValueError):
        keys.bundle_key("sha256:1234")
    assert keys.model_prefix(7) == "jobs/7/model"
    assert keys.checkpoints_prefix(7) == "jobs/7/checkpoints"
    assert keys.tensorboard_prefix(7, 1) == "jobs/7/tensorboard/replica-1"
    assert keys.log_key(7, 2, 0) == "jobs/7/logs/attempt-2/replica-0.log"


def test_delete_one_object_and_a_file_may_take_an_emptied_directorys_name(
    store: ArtifactStore,
) -> None:
    store.put_bytes("data/1/a/b/c.csv", b"c")
    store.put_bytes("data/1/keep.csv", b"k")
    store.delete("data/1/a/b/c.csv")
    assert store.list("data/1") == [("data/1/keep.csv", 1)]
    with pytest.raises(FileNotFoundError):
        store.delete("data/1/a/b/c.csv")
    with pytest.raises(FileNotFoundError):
        store.delete("data/1")  # a directory is not an object: nothing under it goes
    store.put_bytes("data/1/a", b"now a file")  # no empty directory left in its way
    assert store.list("data/1") == [("data/1/a", 10), ("data/1/keep.csv", 1)]


def test_data_keys_stay_under_the_projects_prefix() -> None:
    assert keys.data_key(3, "digits/train.csv") == "data/3/digits/train.csv"
    for bad in ("/etc/passwd", "../2/x", "a/../../b", "a//b", "a\\b", "a\x00b", "x" * 901):
        with pytest.raises(keys.InvalidKey):
            keys.data_key(3, bad)
