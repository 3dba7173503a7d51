"""Code bundles: pack a directory deterministically, check an archive, unpack it safely.

A bundle is a `.tar.gz` named by the sha256 of its bytes. Packing the same tree twice
gives the same bytes (sorted entries, zeroed times and owners, normalised modes, a
gzip header without name or time), so an unchanged directory is never uploaded again.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import posixpath
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pathspec

IGNORE_FILE = ".cohortignore"
# Never packed, whatever .cohortignore says: version control, caches, virtualenvs
# (a directory holding pyvenv.cfg is one, whatever its name).
FIXED_EXCLUDES = [".git/", ".hg/", ".svn/", "__pycache__/", "*.pyc", ".venv/", "venv/",
                  ".mypy_cache/", ".pytest_cache/", ".ruff_cache/", ".ipynb_checkpoints/",
                  ".DS_Store"]
_CHUNK = 1 << 20
# gzip's own default; Python's 9 packs code a few percent smaller at several times the
# time (3-4x on data files). Part of the digest: the same tree packs to the same bytes.
_LEVEL = 6


class BundleRejected(ValueError):
    """An archive or a directory that cannot be a bundle; the message names why."""


@dataclass(frozen=True)
class Limits:
    """Bounds on one bundle: its compressed bytes, its entries, its unpacked bytes."""

    max_bytes: int = 100 * 1024 * 1024
    max_files: int = 10_000
    max_unpacked_bytes: int = 1024 * 1024 * 1024


@dataclass(frozen=True)
class BundleInfo:
    digest: str  # "sha256:<hex>"
    size: int  # compressed bytes
    files: int  # regular files (and links) in it


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The `sha256:<hex>` digest of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


# -- packing ---------------------------------------------------------------------------------

def _ignore_spec(root: Path) -> pathspec.PathSpec:
    lines = list(FIXED_EXCLUDES)
    ignore = root / IGNORE_FILE
    if ignore.is_file():
        lines += ignore.read_text(encoding="utf-8").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines)


def bundle_entries(root: str | os.PathLike[str]) -> list[str]:
    """The '/'-joined relative paths a bundle of `root` holds (dirs end with '/'), sorted.

    Raises:
        BundleRejected: a symlink pointing outside `root`, or a file that is neither a
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
                raise BundleRejected(f"{rel} is not a regular file (a fifo, socket or device): "
                                     f"add it to {IGNORE_FILE}")
            entries.append(rel)
    return sorted(entries)


def _check_link(base: Path, path: Path, rel: str) -> None:
    target = os.readlink(path)
    inside = (path.parent / target).resolve()
    if os.path.isabs(target) or not inside.is_relative_to(base):
        raise BundleRejected(f"{rel} links to {target!r}, outside the directory: copy the "
                             f"file in or add the link to {IGNORE_FILE}")


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
        raise BundleRejected(f"{root} is not a directory")
    files = 0
    with open(dest, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                          compresslevel=_LEVEL) as zipped, \
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in bundle_entries(base):
            info = _tarinfo(base, rel)
            if info.isreg():
                with open(base / rel, "rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
            files += 0 if info.isdir() else 1
    return BundleInfo(digest=sha256_file(dest), size=os.path.getsize(dest), files=files)


# -- checking and unpacking -----------------------------------------------------------------

def _check_member(member: tarfile.TarInfo, names: set[str]) -> str:
    """The member's normalised name, or BundleRejected naming what is wrong with it."""
    name = member.name
    if name.startswith("/") or (len(name) > 1 and name[1] == ":") or "\\" in name:
        raise BundleRejected(f"{name!r} is an absolute path")
    norm = posixpath.normpath(name)
    if norm == ".." or norm.startswith("../") or ".." in name.split("/"):
        raise BundleRejected(f"{name!r} contains '..'")
    if "\x00" in name:
        raise BundleRejected(f"{name!r} contains a NUL byte")
    if member.issym():
        target = posixpath.normpath(posixpath.join(posixpath.dirname(norm), member.linkname))
        if member.linkname.startswith("/") or target == ".." or target.startswith("../"):
            raise BundleRejected(f"{name!r} links to {member.linkname!r}, outside the bundle")
    elif member.islnk():
        target = posixpath.normpath(member.linkname)
        if member.linkname.startswith("/") or target not in names:
            raise BundleRejected(f"{name!r} is a hard link to {member.linkname!r}, which is "
                                 "not a file earlier in the bundle")
    elif not (member.isreg() or member.isdir()):
        raise BundleRejected(f"{name!r} is a device file or a fifo; bundles hold files, "
                             "directories and links only")
    return norm


def check_archive(source: str | os.PathLike[str] | IO[bytes], limits: Limits) -> int:
    """Read a `.tar.gz` through once and return its number of files (non-directories).

    Raises:
        BundleRejected: not a gzip tar archive, or a member that is absolute, climbs out
            with `..`, links outside, is a device or fifo; more entries than
            `limits.max_files`, or more unpacked bytes than `limits.max_unpacked_bytes`.
    """
    names: set[str] = set()
    entries = files = unpacked = 0
    try:
        with _open_tar(source) as tar:
            for member in tar:
                entries += 1
                if entries > limits.max_files:
                    raise BundleRejected(f"more than {limits.max_files} entries (the limit, "
                                         "COHORT_MAX_BUNDLE_FILES)")
                names.add(_check_member(member, names))
                unpacked += member.size if member.isreg() else 0
                if unpacked > limits.max_unpacked_bytes:
                    raise BundleRejected(
                        f"unpacks to more than {limits.max_unpacked_bytes} bytes (the limit, "
                        "COHORT_MAX_BUNDLE_UNPACKED_BYTES)")
                files += 0 if member.isdir() else 1
    except (tarfile.TarError, EOFError, OSError, gzip.BadGzipFile) as exc:
        raise BundleRejected(f"not a readable .tar.gz archive ({exc})") from exc
    return files


def _open_tar(source: str | os.PathLike[str] | IO[bytes]) -> tarfile.TarFile:
    # "r|gz": a stream, read once front to back, never seeking (a store's object works too).
    if isinstance(source, str | os.PathLike):
        return tarfile.open(name=os.fspath(source), mode="r|gz")
    return tarfile.open(fileobj=source, mode="r|gz")


def unpack(archive: str | os.PathLike[str], dest: str | os.PathLike[str], limits: Limits) -> int:
    """Check `archive`, then extract it into the directory `dest`; returns its file count.

    The standard library's "data" filter refuses the same things again as it extracts
    (absolute names, links outside, devices), so a check that missed one still cannot
    write outside `dest`.
    """
    files = check_archive(archive, limits)
    Path(dest).mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, mode="r:gz") as tar:
        try:
            tar.extractall(dest, filter="data")
        except tarfile.FilterError as exc:
            raise BundleRejected(str(exc)) from exc
    return files
