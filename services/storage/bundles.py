"""Code bundles: pack a directory deterministically, check an archive, unpack it safely.

Checking and unpacking share one reading of an archive (archive_members.py: the virtual
tree of its members) and unpacking never calls tarfile's extraction (unpacking.py).

A bundle is a `.tar.gz` named by the sha256 of its bytes. Packing the same tree twice
gives the same bytes (sorted entries, zeroed times and owners, normalised modes, a
gzip header without name or time), so an unchanged directory is never uploaded again.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pathspec

from services.storage.archive_members import BundleRejected, Limits
from services.storage.archive_stream import ArchiveRead, opened, read_archive
from services.storage.unpacking import write_archive

__all__ = [
    "BundleInfo",
    "BundleRejected",
    "Limits",
    "bundle_entries",
    "check_archive",
    "pack",
    "read_top_file",
    "sha256_file",
    "unpack",
]

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
_CHUNK = 1 << 20
# gzip's own default; Python's 9 packs code a few percent smaller at several times the
# time (3-4x on data files). Part of the digest: the same tree packs to the same bytes.
_LEVEL = 6


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


def _ignore_spec(root: Path) -> pathspec.GitIgnoreSpec:
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
                raise BundleRejected(
                    f"{rel} is not a regular file (a fifo, socket or device): "
                    f"add it to {IGNORE_FILE}"
                )
            entries.append(rel)
    return sorted(entries)


def _check_link(base: Path, path: Path, rel: str) -> None:
    target = os.readlink(path)
    inside = (path.parent / target).resolve()
    if os.path.isabs(target) or not inside.is_relative_to(base):
        raise BundleRejected(
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
        raise BundleRejected(f"{root} is not a directory")
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
    return BundleInfo(digest=sha256_file(dest), size=os.path.getsize(dest), files=files)


# -- checking and unpacking -----------------------------------------------------------------


def check_archive(source: str | os.PathLike[str] | IO[bytes], limits: Limits) -> int:
    """Read a `.tar.gz` through once and return its number of files (non-directories).

    The same reading as an unpack's (archive_stream.read_archive), so what this admits
    is exactly what `unpack` writes.

    Raises:
        BundleRejected: not a gzip tar archive, or a member that is absolute, climbs out
            with `..`, is beneath a link, links outside (once every link is followed),
            hard-links to anything but an earlier file, is a device or fifo, appears twice;
            a header whose size does not match its data; more entries than
            `limits.max_files`, or more unpacked bytes than `limits.max_unpacked_bytes`.
            The message names the member and the fix, never a path of this machine.
    """
    state = ArchiveRead(limits)
    try:
        with opened(source) as handle:
            for _placed, _chunks in read_archive(handle, state):
                pass  # read_archive reads and counts the data of what it yields
    except OSError as exc:
        raise BundleRejected(f"not a readable .tar.gz archive ({exc.strerror or exc})") from exc
    return state.files


def unpack(
    archive: str | os.PathLike[str] | IO[bytes],
    dest: str | os.PathLike[str],
    limits: Limits,
    *,
    replace: bool = False,
) -> int:
    """Check `archive`, then write its members into the directory `dest` (made if
    missing); returns its file count. A seekable file object is read twice.

    Nothing is written unless the whole archive passes the check; then
    unpacking.write_archive writes it without following any link (`replace`: a file
    already at a member's name is replaced rather than refused).

    Raises:
        BundleRejected: see check_archive. OSError: the disk refused a write.
    """
    with opened(archive) as handle:
        files = check_archive(handle, limits)
        handle.seek(0)
        Path(dest).mkdir(parents=True, exist_ok=True)
        dest_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            write_archive(handle, dest_fd, limits, replace=replace)
        finally:
            os.close(dest_fd)
    return files


def read_top_file(
    archive: str | os.PathLike[str] | IO[bytes], name: str, limits: Limits, max_bytes: int
) -> bytes | None:
    """The bytes of the regular file `name` at the archive's top level (None: there is
    none), read through the same checked reading as an unpack; the archive is read only
    as far as that member (`pack` sorts its entries).

    Raises:
        BundleRejected: the member is larger than `max_bytes`, or is not a regular file
            (a link, a directory), or the archive is refused (see check_archive).
    """
    with opened(archive) as handle:
        for placed, chunks in read_archive(handle, ArchiveRead(limits)):
            if placed.parts != (name,):
                continue
            if placed.kind != "file":
                raise BundleRejected(f"{name} is a {placed.kind}, not a file: make it a file")
            data = bytearray()
            for chunk in chunks:
                data += chunk
                if len(data) > max_bytes:
                    raise BundleRejected(f"{name} is larger than {max_bytes} bytes: shorten it")
            return bytes(data)
    return None
