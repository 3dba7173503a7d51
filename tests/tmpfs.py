"""A small filesystem of a test's own: a tmpfs mounted on a directory under tmp_path,
for what a full disk does (tests/capabilities.py: need_mount)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.capabilities import need_mount

FILLER = ".filler"  # the file that takes the space; deleting it frees the disk


@contextmanager
def small_tmpfs(path: Path, size_bytes: int) -> Iterator[Path]:
    """`path`, a tmpfs of `size_bytes` while the block runs; skips on a machine that
    cannot mount. Unmounted after (lazily: a process that still has a file open there
    does not keep the test from ending)."""
    need_mount()
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755", "tmpfs", str(path)],
        check=True,
        capture_output=True,
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill(path: Path, leave_bytes: int = 0) -> Path:
    """Take all of `path`'s filesystem but `leave_bytes` with one file (FILLER), as a
    disk full of someone else's data would be; returns the file."""
    filler = path / FILLER
    free = shutil.disk_usage(path).free - leave_bytes
    chunk = b"\0" * (1 << 20)
    with open(filler, "ab", buffering=0) as handle:
        try:
            while free > 0:
                free -= handle.write(chunk[: min(len(chunk), free)])
        except OSError:  # full before `free` ran out (tmpfs counts in pages)
            pass
    return filler


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free
