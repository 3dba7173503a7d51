"""Packing, checking and unpacking code bundles (services/storage/bundles.py)."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from cohort.bundles import PackRefused, bundle_entries, pack
from services.storage.bundles import (
    BundleRejected,
    Limits,
    check_archive,
    sha256_file,
    unpack,
)
from tests.hostile_bundles import HOSTILE, big_unpacked, good, many_files


def _tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "model.py").write_text("X = 1\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "run.sh", 0o755)
    return root


def test_packing_the_same_tree_twice_gives_the_same_digest(tmp_path: Path) -> None:
    root = _tree(tmp_path / "code")
    first = pack(root, tmp_path / "a.tar.gz")
    os.utime(root / "train.py", (1, 1))  # times are not part of a bundle
    second = pack(root, tmp_path / "b.tar.gz")
    assert first == second
    assert first.digest == sha256_file(tmp_path / "a.tar.gz")
    assert first.files == 4
    (root / "train.py").write_text("print('changed')\n")
    assert pack(root, tmp_path / "c.tar.gz").digest != first.digest


def test_fixed_excludes_and_cohortignore_are_honoured(tmp_path: Path) -> None:
    root = _tree(tmp_path / "code")
    for junk in (
        ".git/HEAD",
        "pkg/__pycache__/model.cpython-311.pyc",
        "myenv/lib/x.py",
        "data/big.bin",
        "notes.log",
        "data/keep.csv",
    ):
        (root / junk).parent.mkdir(parents=True, exist_ok=True)
        (root / junk).write_text("junk")
    (root / "myenv" / "pyvenv.cfg").write_text("home = /usr/bin\n")  # a virtualenv by any name
    (root / ".cohortignore").write_text(
        "# data stays out, except the csv\n*.log\ndata/*\n!data/keep.csv\n"
    )
    entries = bundle_entries(root)
    assert entries == [
        ".cohortignore",
        "data/",
        "data/keep.csv",
        "pkg/",
        "pkg/__init__.py",
        "pkg/model.py",
        "run.sh",
        "train.py",
    ]


def test_a_symlink_out_of_the_tree_is_refused_when_packing(tmp_path: Path) -> None:
    root = _tree(tmp_path / "code")
    (root / "secrets").symlink_to("/etc/passwd")
    with pytest.raises(PackRefused, match="secrets links to '/etc/passwd'"):
        pack(root, tmp_path / "b.tar.gz")
    (root / "secrets").unlink()
    (root / "alias.py").symlink_to("train.py")  # inside: kept as a link
    pack(root, tmp_path / "b.tar.gz")
    unpack(tmp_path / "b.tar.gz", tmp_path / "out", Limits())
    assert os.readlink(tmp_path / "out" / "alias.py") == "train.py"


def test_unpack_restores_the_tree_with_its_exec_bits(tmp_path: Path) -> None:
    root = _tree(tmp_path / "code")
    pack(root, tmp_path / "b.tar.gz")
    assert unpack(tmp_path / "b.tar.gz", tmp_path / "out", Limits()) == 4
    assert (tmp_path / "out" / "pkg" / "model.py").read_text() == "X = 1\n"
    assert os.stat(tmp_path / "out" / "run.sh").st_mode & 0o100


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_archives_are_refused_and_nothing_is_unpacked(tmp_path: Path, name: str) -> None:
    make, word = HOSTILE[name]
    archive = tmp_path / "hostile.tar.gz"
    archive.write_bytes(make())
    with pytest.raises(BundleRejected) as refused:
        check_archive(archive, Limits())
    assert word in str(refused.value)
    with pytest.raises(BundleRejected):
        unpack(archive, tmp_path / "out", Limits())
    assert not (tmp_path / "out").exists()


def test_the_file_count_and_the_unpacked_size_are_bounded(tmp_path: Path) -> None:
    archive = tmp_path / "many.tar.gz"
    archive.write_bytes(many_files(11))
    assert check_archive(archive, Limits(max_files=11)) == 11
    with pytest.raises(BundleRejected, match="more than 10 entries"):
        check_archive(archive, Limits(max_files=10))
    archive.write_bytes(big_unpacked(2_000_000))
    assert archive.stat().st_size < 100_000
    with pytest.raises(BundleRejected, match="unpacks to more than 1000000 bytes"):
        check_archive(archive, Limits(max_unpacked_bytes=1_000_000))


def test_a_valid_archive_from_another_tool_passes(tmp_path: Path) -> None:
    archive = tmp_path / "good.tar.gz"
    archive.write_bytes(good())
    assert check_archive(archive, Limits()) == 2
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["data/rows.csv", "train.py"]
