"""A bundle cannot write outside its directory, on any Python: the realpath-overflow
archive (CVE-2025-4517, which this machine's 3.11.7 `tarfile` lets through its "data"
filter), link chains out of the root, members placed through links, lying headers; the
api refuses what the agent would, and the agent unpacks as the job's uid, not root.

New modules are imported inside the tests, so this file also runs (and fails where the
old code fails) against the code before them."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from cohort.bundles import pack
from services.settings import Settings
from services.storage.bundles import BundleRejected, Limits, check_archive, unpack
from tests.factories import create_token
from tests.hostile_bundles import (
    HOSTILE,
    OVERFLOW_MEMBER,
    link_chain_out,
    realpath_overflow,
    tar_gz,
)


def everything_under(root: Path) -> set[str]:
    """Every path under `root`, links not followed."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            found.add(os.path.relpath(os.path.join(dirpath, name), root))
    return found


def overflow_at(tmp_path: Path, hard_link: bool = False) -> tuple[Path, Path]:
    """The CVE-2025-4517 archive sized for the destination `tmp_path/outer/dest`, as
    CPython's test sizes it; returns the archive and the destination."""
    dest = tmp_path / "outer" / "dest"
    dest.parent.mkdir()
    archive = tmp_path / "overflow.tar.gz"
    archive.write_bytes(realpath_overflow(len(str(dest)), hard_link=hard_link))
    return archive, dest


def test_the_realpath_overflow_bundle_is_refused_by_the_check_naming_its_member(
    tmp_path: Path,
) -> None:
    archive, _dest = overflow_at(tmp_path)
    with pytest.raises(BundleRejected) as refused:
        check_archive(archive, Limits())
    message = str(refused.value)
    assert f"member '{OVERFLOW_MEMBER}" in message and "beneath 'a', a link" in message
    assert str(tmp_path) not in message


@pytest.mark.parametrize("hard_link", [False, True], ids=["file", "hard-link"])
def test_unpacking_the_realpath_overflow_bundle_writes_nothing_outside_its_destination(
    tmp_path: Path, hard_link: bool
) -> None:
    archive, dest = overflow_at(tmp_path, hard_link)
    outer = dest.parent
    (outer / "flag").write_text("the node's file")
    before = everything_under(tmp_path)
    try:
        unpack(archive, dest, Limits())
    except BundleRejected as exc:
        refused: str | None = str(exc)
    else:
        refused = None
    # The paths the archive aims at, one level above the destination.
    assert not (outer / "newfile").exists(), "the unpack wrote a file outside its directory"
    assert (outer / "flag").read_text() == "the node's file"
    assert refused is not None and f"member '{OVERFLOW_MEMBER}" in refused
    assert everything_under(tmp_path) == before  # refused whole: not even `dest` made


def test_the_writer_alone_refuses_the_overflow_bundle_before_writing_through_a_link(
    tmp_path: Path,
) -> None:
    """Without the check first (an archive swapped after it), the writer still decides
    from names: it stops at the same member, with no link made and nothing outside."""
    from services.storage.unpacking import write_archive

    archive, dest = overflow_at(tmp_path)
    dest.mkdir()
    before = everything_under(tmp_path)
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with (
            archive.open("rb") as handle,
            pytest.raises(BundleRejected, match="beneath 'a', a link"),
        ):
            write_archive(handle, fd, Limits())
    finally:
        os.close(fd)
    written = everything_under(dest)
    assert not any(os.path.islink(dest / p) for p in written)  # links come last, never made
    assert everything_under(tmp_path) - {f"outer/dest/{p}" for p in written} == before
    assert not (dest.parent / "newfile").exists()


def test_a_link_chain_out_of_the_root_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "chain.tar.gz"
    archive.write_bytes(link_chain_out())
    with pytest.raises(BundleRejected, match="member 'sub/l/x' is beneath 'sub/l'"):
        check_archive(archive, Limits())
    with pytest.raises(BundleRejected):
        unpack(archive, tmp_path / "out" / "dest", Limits())
    assert not (tmp_path / "out" / "escaped.txt").exists()
    assert not (tmp_path / "out" / "dest").exists()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_each_hostile_archive_is_refused_by_the_check_and_by_unpack_writing_nothing(
    tmp_path: Path, name: str
) -> None:
    make, word = HOSTILE[name]
    archive = tmp_path / "hostile.tar.gz"
    archive.write_bytes(make())
    with pytest.raises(BundleRejected) as refused:
        check_archive(archive, Limits())
    assert word in str(refused.value)
    before = everything_under(tmp_path)
    with pytest.raises(BundleRejected) as again:
        unpack(archive, tmp_path / "out", Limits())
    assert str(again.value) == str(refused.value)  # one check: the same refusal
    assert everything_under(tmp_path) == before


def test_setuid_sticky_and_world_write_bits_are_dropped(tmp_path: Path) -> None:
    def add(tar: tarfile.TarFile) -> None:
        for name, mode in (("suid.sh", 0o4777), ("sgid.py", 0o2664), ("plain.txt", 0o666)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = 1, mode
            tar.addfile(info, io.BytesIO(b"x"))
        info = tarfile.TarInfo("shared")
        info.type, info.mode = tarfile.DIRTYPE, 0o1777
        tar.addfile(info)

    archive = tmp_path / "modes.tar.gz"
    archive.write_bytes(tar_gz(add))
    umask = os.umask(0o022)
    try:
        unpack(archive, tmp_path / "out", Limits())
    finally:
        os.umask(umask)

    def mode(name: str) -> int:
        return stat.S_IMODE(os.lstat(tmp_path / "out" / name).st_mode)

    assert (mode("suid.sh"), mode("sgid.py"), mode("plain.txt"), mode("shared")) == (
        0o755,
        0o644,
        0o644,
        0o755,
    )


def test_a_size_lie_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    make, _word = HOSTILE["declared size too small"]
    archive = tmp_path / "lie.tar.gz"
    archive.write_bytes(make())
    with pytest.raises(BundleRejected, match="declared size does not match its data"):
        unpack(archive, tmp_path / "out", Limits())
    assert not (tmp_path / "out").exists()


def _tree(root: Path) -> Path:
    (root / "pkg" / "lib").mkdir(parents=True)
    (root / "data" / "empty").mkdir(parents=True)
    (root / "train.py").write_text("import lib.model\n")
    (root / "pkg" / "lib" / "model.py").write_bytes(os.urandom(3000))
    (root / "pkg" / "lib" / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "pkg" / "lib" / "run.sh", 0o755)
    (root / "lib").symlink_to("pkg/lib")  # a directory link inside the tree
    (root / "alias.py").symlink_to("train.py")
    (root / "pkg" / "rows").symlink_to("../data")
    (root / "data" / "rows.csv").write_text("a,b\n1,2\n")
    return root


def describe(root: Path) -> dict[str, tuple[str, str]]:
    """Each path: its kind and its bytes' digest, link target, or exec bit."""
    seen: dict[str, tuple[str, str]] = {}
    for rel in sorted(everything_under(root)):
        path = root / rel
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            seen[rel] = ("link", os.readlink(path))
        elif stat.S_ISDIR(info.st_mode):
            seen[rel] = ("dir", "")
        else:
            seen[rel] = (
                "file",
                hashlib.sha256(path.read_bytes()).hexdigest()
                + ("+x" if info.st_mode & 0o100 else ""),
            )
    return seen


def test_a_good_bundle_with_in_tree_links_unpacks_identical_to_its_source(tmp_path: Path) -> None:
    source = _tree(tmp_path / "src")
    info = pack(source, tmp_path / "b.tar.gz")
    assert check_archive(tmp_path / "b.tar.gz", Limits()) == info.files
    assert unpack(tmp_path / "b.tar.gz", tmp_path / "out", Limits()) == info.files
    assert describe(tmp_path / "out") == describe(source)
    assert (tmp_path / "out" / "lib" / "run.sh").read_text() == "#!/bin/sh\n"  # via the link


def test_replacing_files_never_writes_through_a_link_already_in_the_destination(
    tmp_path: Path,
) -> None:
    """The CLI unpacks downloads into an existing directory, replacing files: a link
    found there is replaced or refused, never written through."""
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "model").symlink_to(outside)  # a directory link where the archive has a dir
    (dest / "notes.txt").symlink_to(outside / "notes.txt")  # a file link
    archive = tmp_path / "a.tar.gz"

    def add(tar: tarfile.TarFile) -> None:
        for name in ("notes.txt", "model/weights.bin"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"ok"))

    archive.write_bytes(tar_gz(add))
    with pytest.raises(NotADirectoryError, match="exists and is not a directory"):
        unpack(archive, dest, Limits(), replace=True)
    assert os.listdir(outside) == []
    assert not os.path.islink(dest / "notes.txt")  # replaced by the file, not followed
    assert (dest / "notes.txt").read_bytes() == b"ok"


def test_the_unpacked_bytes_are_bounded_as_they_are_read(tmp_path: Path) -> None:
    archive = tmp_path / "big.tar.gz"
    archive.write_bytes(
        tar_gz(lambda tar: tar.addfile(_info("zeros", 3_000_000), io.BytesIO(b"\0" * 3_000_000)))
    )
    with pytest.raises(BundleRejected, match="unpacks to more than 1000000 bytes"):
        unpack(archive, tmp_path / "out", Limits(max_unpacked_bytes=1_000_000))
    assert not (tmp_path / "out").exists()


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


def test_the_api_refuses_the_overflow_bundle_with_422_naming_the_member(
    client: TestClient, session: Session
) -> None:
    headers = {"Authorization": f"Bearer {create_token(session, 'unpack')[0]}"}
    data = realpath_overflow()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    response = client.put(f"/api/v1/bundles/{digest}", content=data, headers=headers)
    assert response.status_code == 422, response.text
    message = response.json()["message"]
    assert f"member '{OVERFLOW_MEMBER}" in message and "beneath 'a'" in message
    assert "/" + "jobs" not in message and "cache" not in message


UID_BASE = 1_930_000_000  # COHORT_REPLICA_UID_BASE for these tests (others use 1_9[01]...)


def agent_settings(tmp_path: Path) -> Settings:
    return Settings(
        DATA_DIR=tmp_path / "data",
        ARTIFACT_URL=str(tmp_path / "store"),
        REPLICA_UID_BASE=UID_BASE,
        REPLICA_UID_RANGE=1000,
    )


def stored(settings: Settings, data: bytes) -> str:
    from services.storage.keys import bundle_key
    from services.storage.store import open_store

    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    open_store(settings=settings).put_bytes(bundle_key(digest), data)
    return digest


def prepare(settings: Settings, job: int, digest: str) -> Path:
    """What the agent does for a replica with a bundle: lay out its directories, then
    fetch and unpack (workers/node/agent.py); returns the replica's code directory."""
    from services.wire.replica import ReplicaSpec
    from workers import layout
    from workers.node import isolation
    from workers.node.prepare import Preparer

    isolation.lay_out(settings.data_dir, job, 1, 0, isolation.replica_user(settings, job))
    Preparer(settings).prepare(
        ReplicaSpec(job, 1, 0, 1, None, "one_device", bundle=digest, command=["python", "train.py"])
    )
    return layout.code_dir(settings.data_dir, job, 1, 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="unpacking as a job's uid needs an agent as root")
def test_the_agent_unpacks_a_bundle_as_the_jobs_uid_never_as_root(tmp_path: Path) -> None:
    settings = agent_settings(tmp_path)
    source = _tree(tmp_path / "src")
    pack(source, tmp_path / "b.tar.gz")
    code = prepare(settings, 7, stored(settings, (tmp_path / "b.tar.gz").read_bytes()))
    uid = UID_BASE + 7
    everything = [code, *(code / rel for rel in everything_under(code))]
    # Written by a process running as the job's uid: the agent changes no owner before
    # the replica's spawn (launcher.hand_over), so root's writes would show as root's.
    assert {(os.lstat(p).st_uid, os.lstat(p).st_gid) for p in everything} == {(uid, uid)}
    # Under the replicas' umask (077): nothing for the group or others.
    assert not any(os.lstat(p).st_mode & 0o077 for p in everything if not p.is_symlink())
    assert describe(code) == describe(source)


def test_a_refused_bundle_fails_the_replica_with_the_member_and_no_node_path(
    tmp_path: Path,
) -> None:
    from workers.node.bundle_cache import BundleUnavailable

    settings = agent_settings(tmp_path)
    digest = stored(settings, realpath_overflow())
    with pytest.raises(BundleUnavailable) as refused:
        prepare(settings, 8, digest)
    message = str(refused.value)
    assert f"member '{OVERFLOW_MEMBER}" in message and digest in message
    assert str(tmp_path) not in message and "/data" not in message
    assert not (tmp_path / "data" / "jobs" / "8" / "attempt-1" / "newfile").exists()
    assert not (tmp_path / "data" / "jobs" / "8" / "attempt-1" / "replica-0" / "code").exists()


def test_links_too_intricate_to_follow_are_refused_in_bounded_time(tmp_path: Path) -> None:
    """Long chains of long targets, named by thousands of links: the check stops after a
    bounded number of steps rather than holding the api for minutes."""

    def add(tar: tarfile.TarFile) -> None:
        directory = tarfile.TarInfo("d")
        directory.type = tarfile.DIRTYPE
        tar.addfile(directory)
        for i in range(40):
            link = tarfile.TarInfo(f"l{i}")
            link.type, link.linkname = tarfile.SYMTYPE, "d/../" * 800 + f"l{i + 1}"
            tar.addfile(link)
        for i in range(5000):
            link = tarfile.TarInfo(f"m{i}")
            link.type, link.linkname = tarfile.SYMTYPE, "l0"
            tar.addfile(link)

    archive = tmp_path / "intricate.tar.gz"
    archive.write_bytes(tar_gz(add))
    began = time.monotonic()
    with pytest.raises(BundleRejected, match="following the bundle's links takes more than"):
        check_archive(archive, Limits())
    assert time.monotonic() - began < 30
