"""Code bundles on the server's side: check an archive, unpack it safely, its digest.

Checking and unpacking share one reading of an archive (archive_members.py: the virtual
tree of its members) and unpacking never calls tarfile's extraction (unpacking.py).
A bundle is a `.tar.gz` named by the sha256 of its bytes; clients pack it
(cohort/bundles.py), and nothing they send is trusted here.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import IO

from services.storage.archive_members import BundleRejected, Limits
from services.storage.archive_stream import ArchiveRead, opened, read_archive
from services.storage.unpacking import write_archive

__all__ = [
    "BundleRejected",
    "Limits",
    "check_archive",
    "read_top_file",
    "sha256_file",
    "unpack",
]

_CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The `sha256:<hex>` digest of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


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
