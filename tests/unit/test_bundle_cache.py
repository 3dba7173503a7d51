"""The node's bundle cache against a real local artifact store: verify, unpack per replica
(in a child process), evict the least recently used, fetch a digest once under
concurrency."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import pytest

from cohort.bundles import pack
from services.settings import Settings
from services.storage.bundles import Limits
from services.storage.keys import bundle_key
from services.storage.store import ArtifactStore, open_store
from workers.node.bundle_cache import BundleCache, BundleUnavailable


class CountingStore(ArtifactStore):
    """The real local store, counting (and slowing) its downloads so a race shows."""

    def __init__(self, inner: ArtifactStore) -> None:
        super().__init__(inner.fs, inner.root, url=inner.url)
        self.fetches: list[str] = []

    def get_file(self, key: str, dest_path: str | os.PathLike[str]) -> None:
        self.fetches.append(key)
        time.sleep(0.2)  # long enough for a second thread to ask meanwhile
        super().get_file(key, dest_path)


@pytest.fixture
def store(tmp_path: Path) -> CountingStore:
    return CountingStore(open_store(str(tmp_path / "store"), settings=Settings(DATA_DIR=tmp_path)))


def upload(store: ArtifactStore, tmp_path: Path, name: str, body: str) -> str:
    """Pack a one-module tree, store it under its digest; returns the digest."""
    tree = tmp_path / "src" / name
    tree.mkdir(parents=True)
    (tree / "train.py").write_text(body)
    archive = tmp_path / f"{name}.tar.gz"
    info = pack(tree, archive)
    store.put_file(bundle_key(info.digest), archive)
    return info.digest


def cache(tmp_path: Path, store: ArtifactStore, max_bytes: int = 1 << 30) -> BundleCache:
    return BundleCache(tmp_path / "cache", store, max_bytes, Limits())


def test_each_replica_gets_its_own_copy_of_a_verified_bundle(
    tmp_path: Path, store: CountingStore
) -> None:
    digest = upload(store, tmp_path, "a", "print('a')\n")
    bundles = cache(tmp_path, store)
    first, second = tmp_path / "r0" / "code", tmp_path / "r1" / "code"
    bundles.checkout(digest, first)
    bundles.checkout(digest, second)
    assert (first / "train.py").read_text() == (second / "train.py").read_text() == "print('a')\n"
    assert len(store.fetches) == 1  # fetched once, unpacked into each replica's directory
    # One replica's writes never reach another's tree, nor the cache's.
    (first / "train.py").write_text("changed")
    (first / "new.txt").write_text("x")
    assert (second / "train.py").read_text() == "print('a')\n"
    assert not (second / "new.txt").exists()
    third = tmp_path / "r2" / "code"
    bundles.checkout(digest, third)
    assert (third / "train.py").read_text() == "print('a')\n"


def test_bytes_that_do_not_match_the_digest_are_refused(
    tmp_path: Path, store: CountingStore
) -> None:
    good = upload(store, tmp_path, "a", "print('a')\n")
    forged = "sha256:" + hashlib.sha256(b"something else").hexdigest()
    store.put_file(bundle_key(forged), tmp_path / "a.tar.gz")  # the wrong bytes
    bundles = cache(tmp_path, store)
    with pytest.raises(BundleUnavailable, match="does not match its digest"):
        bundles.checkout(forged, tmp_path / "r0" / "code")
    assert not (tmp_path / "r0" / "code").exists()
    assert not (tmp_path / "cache" / f"{forged[7:]}.tar.gz").exists()  # not cached
    bundles.checkout(good, tmp_path / "r1" / "code")  # the cache still works


def test_a_bundle_missing_from_the_store_is_refused(tmp_path: Path, store: CountingStore) -> None:
    with pytest.raises(BundleUnavailable, match="not in the artifact store"):
        cache(tmp_path, store).checkout("0" * 64, tmp_path / "r0" / "code")


def test_a_bundle_over_the_size_limit_is_refused(tmp_path: Path, store: CountingStore) -> None:
    digest = upload(store, tmp_path, "a", "print('a')\n")
    bundles = BundleCache(tmp_path / "cache", store, 1 << 30, Limits(max_bytes=10))
    with pytest.raises(BundleUnavailable, match="over the limit"):
        bundles.checkout(digest, tmp_path / "r0" / "code")
    assert store.fetches == []


def test_two_replicas_asking_at_once_fetch_a_digest_once(
    tmp_path: Path, store: CountingStore
) -> None:
    digest = upload(store, tmp_path, "a", "print('a')\n")
    bundles = cache(tmp_path, store)
    errors: list[BaseException] = []

    def checkout(index: int) -> None:
        try:
            bundles.checkout(digest, tmp_path / f"r{index}" / "code")
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=checkout, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(store.fetches) == 1
    for index in range(4):
        assert (tmp_path / f"r{index}" / "code" / "train.py").read_text() == "print('a')\n"


def test_the_least_recently_used_bundle_is_evicted(tmp_path: Path, store: CountingStore) -> None:
    digests = [
        upload(store, tmp_path, name, f"print({name!r})\n" + "#" * 5000) for name in ("a", "b", "c")
    ]
    probe = cache(tmp_path / "probe", store)
    probe.checkout(digests[0], tmp_path / "probe-code")
    one = sum(
        f.stat().st_size
        for f in (tmp_path / "probe" / "cache").rglob("*")
        if f.is_file() and not f.name.endswith(".lock")
    )
    bundles = cache(tmp_path, store, max_bytes=2 * one + one // 2)  # room for two
    bundles.checkout(digests[0], tmp_path / "r0")
    time.sleep(0.05)
    bundles.checkout(digests[1], tmp_path / "r1")
    time.sleep(0.05)
    bundles.checkout(digests[0], tmp_path / "r2")  # a is now more recent than b
    time.sleep(0.05)
    bundles.checkout(digests[2], tmp_path / "r3")
    cached = {p.name.removesuffix(".tar.gz") for p in (tmp_path / "cache").glob("*.tar.gz")}
    assert cached == {digests[0][7:], digests[2][7:]}
    assert not (tmp_path / "cache" / digests[1][7:]).exists()  # its tree went too


def test_a_replicas_inputs_are_fetched_into_the_jobs_input_directory(tmp_path: Path) -> None:
    from services.wire.replica import ReplicaSpec
    from workers import layout
    from workers.node.prepare import InputUnavailable, Preparer

    settings = Settings(DATA_DIR=tmp_path / "data", ARTIFACT_URL=str(tmp_path / "store"))
    open_store(settings=settings).put_bytes("data/3/train.csv", b"x,y\n1,2\n")
    preparer = Preparer(settings)
    spec = ReplicaSpec(
        5,
        1,
        0,
        1,
        None,
        "one_device",
        command=["python", "train.py"],
        inputs={"train.csv": "data/3/train.csv"},
    )
    preparer.prepare(spec)
    fetched = layout.input_dir(settings.data_dir, 5) / "train.csv"
    assert fetched.read_bytes() == b"x,y\n1,2\n"
    missing = ReplicaSpec(
        6, 1, 0, 1, None, "one_device", command=["true"], inputs={"a.csv": "data/3/none.csv"}
    )
    with pytest.raises(InputUnavailable, match="'data/3/none.csv' is not in the artifact"):
        preparer.prepare(missing)


def test_a_disk_filled_by_the_unpack_is_reported_as_no_space(
    tmp_path: Path, store: CountingStore
) -> None:
    """The child unpacks; its ENOSPC comes back as one (the replica's retryable exit),
    and the half-written code directory is gone."""
    from services.exit_codes import is_no_space
    from tests.tmpfs import small_tmpfs

    tree = tmp_path / "src" / "big"
    tree.mkdir(parents=True)
    (tree / "zeros.bin").write_bytes(b"\0" * (3 << 20))  # compresses to a few KiB
    info = pack(tree, tmp_path / "big.tar.gz")
    store.put_file(bundle_key(info.digest), tmp_path / "big.tar.gz")
    with small_tmpfs(tmp_path / "disk", 1 << 20) as disk:
        with pytest.raises(OSError) as full:
            cache(tmp_path, store).checkout(info.digest, disk / "r0" / "code")
        assert is_no_space(full.value)
        assert not (disk / "r0" / "code").exists()
