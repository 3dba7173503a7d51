"""Packing a code directory into a bundle, as the SDK and CLI upload it (client side).

A bundle is a `.tar.gz` named by the sha256 of its bytes. Packing the same tree twice
gives the same bytes (sorted entries, zeroed times and owners, normalised modes, a
gzip header without name or time), so an unchanged directory is never uploaded again.
`.cohortignore` (gitignore syntax) leaves files out. The server checks and unpacks what
it is sent on its own terms (services/storage/bundles.py): nothing here is trusted there.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pathspec


class PackRefused(ValueError):
    """The directory cannot be packed as it is; the message says what to change."""


IGNORE_FILE = ".cohortignore"
# Never packed, whatever .cohortignore says: version control, caches, virtualenvs
# (a directory holding pyvenv.cfg is one, whatever its name).
FIXED_EXCLUDES = [
    ".git/",
    ".hg/",
    ".svn/",
    "__pycache__/",
    "*.pyc",
    ".venv/",
    "venv/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    ".ipynb_checkpoints/",
    ".DS_Store",
]
# gzip's own default; Python's 9 packs code a few percent smaller at several times the
# time (3-4x on data files). Part of the digest: the same tree packs to the same bytes.
_LEVEL = 6


@dataclass(frozen=True)
class BundleInfo:
    digest: str  # "sha256:<hex>"
    size: int  # compressed bytes
    files: int  # regular files (and links) in it


def _ignore_spec(root: Path) -> pathspec.GitIgnoreSpec:
    lines = list(FIXED_EXCLUDES)
    ignore = root / IGNORE_FILE
    if ignore.is_file():
        lines += ignore.read_text(encoding="utf-8").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines)


def bundle_entries(root: str | os.PathLike[str]) -> list[str]:
    """The '/'-joined relative paths a bundle of `root` holds (dirs end with '/'), sorted.

    Raises:
        PackRefused: a symlink pointing outside `root`, or a file that is neither a
            regular file, a directory nor a symlink (a fifo, a socket, a device).
    """
    base = Path(root).resolve()
    spec = _ignore_spec(base)
    entries: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base):
        here = Path(dirpath)
        keep = []
        for name in sorted(dirnames):
            rel = (here / name).relative_to(base).as_posix() + "/"
            if spec.match_file(rel) or (here / name / "pyvenv.cfg").exists():
                continue
            if (here / name).is_symlink():
                _check_link(base, here / name, rel)
                entries.append(rel.rstrip("/"))
                continue
            keep.append(name)
            entries.append(rel)
        dirnames[:] = keep
        for name in sorted(filenames):
            path = here / name
            rel = path.relative_to(base).as_posix()
            if spec.match_file(rel):
                continue
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                _check_link(base, path, rel)
            elif not stat.S_ISREG(mode):
                raise PackRefused(
                    f"{rel} is not a regular file (a fifo, socket or device): "
                    f"add it to {IGNORE_FILE}"
                )
            entries.append(rel)
    return sorted(entries)


def _check_link(base: Path, path: Path, rel: str) -> None:
    target = os.readlink(path)
    inside = (path.parent / target).resolve()
    if os.path.isabs(target) or not inside.is_relative_to(base):
        raise PackRefused(
            f"{rel} links to {target!r}, outside the directory: copy the "
            f"file in or add the link to {IGNORE_FILE}"
        )


def _tarinfo(base: Path, rel: str) -> tarfile.TarInfo:
    path = base / rel.rstrip("/")
    info = tarfile.TarInfo(rel.rstrip("/"))
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
    elif stat.S_ISDIR(st.st_mode):
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.size = st.st_size
        info.mode = 0o755 if st.st_mode & stat.S_IXUSR else 0o644
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info


def pack(root: str | os.PathLike[str], dest: str | os.PathLike[str]) -> BundleInfo:
    """Write the bundle of `root` to `dest` and return its digest, size and file count."""
    base = Path(root).resolve()
    if not base.is_dir():
        raise PackRefused(f"{root} is not a directory")
    files = 0
    with (
        open(dest, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=_LEVEL) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel in bundle_entries(base):
            info = _tarinfo(base, rel)
            if info.isreg():
                with open(base / rel, "rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
            files += 0 if info.isdir() else 1
    with open(dest, "rb") as packed:
        digest = hashlib.file_digest(packed, "sha256").hexdigest()
    return BundleInfo(digest=f"sha256:{digest}", size=os.path.getsize(dest), files=files)
