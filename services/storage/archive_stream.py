"""Reading a `.tar.gz` bundle as a stream: each member's header and data, bounded.

Every reader of a bundle (the api's check, the agent's and the CLI's unpacks) goes
through `read_archive`, which places each member in the virtual tree of
services/storage/archive_members.py and yields only what it admits, with the data of
each file read from the tar stream itself (never through tarfile's extraction) and
counted against the bundle's limits as it is read.
"""

from __future__ import annotations

import gzip
import os
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Protocol, cast

from services.storage.archive_members import BundleRejected, Limits, MemberTree, Placed, shown

_CHUNK = 1 << 16
# Bytes of headers (names, pax records, padding) allowed beside the members' data: a
# header of a gigabyte would otherwise be held in memory whole before any check sees it.
_HEADER_BYTES_BASE, _HEADER_BYTES_PER_MEMBER = 1 << 20, 16 << 10
# tarfile's own marker for the zero block that ends an archive (not in its stubs).
_END_OF_ARCHIVE: type[Exception] = tarfile.EOFHeaderError  # type: ignore[attr-defined]
_UNREADABLE = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)


class _Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...
    def tell(self) -> int: ...


class _Decompressed:
    """The archive's tar bytes, decompressed, with headers' bytes bounded as they are read."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.gzip = gzip.GzipFile(fileobj=raw, mode="rb")
        self.total = self.data = self.members = 0

    def read(self, size: int = -1) -> bytes:
        chunk = self.gzip.read(size if size >= 0 else _CHUNK)
        self.total += len(chunk)
        allowed = (
            _HEADER_BYTES_BASE + _HEADER_BYTES_PER_MEMBER * (self.members + 1) + 4 * _CHUNK
        )  # tarfile reads ahead of what the data's reader has counted
        if self.total - self.data > allowed:
            raise BundleRejected(
                f"its headers hold more than {allowed} bytes in its first "
                f"{self.members + 1} entries (names or pax records out of "
                "all proportion): pack it with `cohort bundle push`"
            )
        return chunk


class _Tar(tarfile.TarFile):
    ended_by: Exception | None = None  # the header error that ended the iteration


class _Header(tarfile.TarInfo):
    @classmethod
    def fromtarfile(cls, tarfile: tarfile.TarFile) -> _Header:
        try:
            header = super().fromtarfile(tarfile)
        except Exception as exc:
            cast("_Tar", tarfile).ended_by = exc
            raise
        cast("_Tar", tarfile).ended_by = None
        return header


@dataclass
class ArchiveRead:
    """Counts kept while an archive is read: its entries, non-directories, data bytes."""

    limits: Limits
    tree: MemberTree = field(default_factory=MemberTree)
    entries: int = 0
    files: int = 0
    unpacked: int = 0
    last: str = ""  # the last member's name, for a message


def read_archive(source: IO[bytes], state: ArchiveRead) -> Iterator[tuple[Placed, Iterator[bytes]]]:
    """Each admitted member of the `.tar.gz` `source`, in order, with its data's chunks
    (files only; a caller that skips them still has them read and counted). Symlinks
    come out at the end, after the whole tree is checked.

    Raises:
        BundleRejected: a member refused (the message names it and the fix), a limit
            passed, a header whose declared size does not match its data, or not a
            readable gzip tar archive.
    """
    stream = _Decompressed(source)
    links: list[Placed] = []
    try:
        with _Tar.open(fileobj=cast("IO[bytes]", stream), mode="r|", tarinfo=_Header) as tar:
            for member in tar:
                state.entries += 1
                state.last = member.name
                stream.members = state.entries
                if state.entries > state.limits.max_files:
                    raise BundleRejected(
                        f"more than {state.limits.max_files} entries (the "
                        "limit, COHORT_MAX_BUNDLE_FILES)"
                    )
                placed = state.tree.place(member)
                if placed is None:
                    continue
                state.files += 0 if placed.kind == "dir" else 1
                if placed.kind == "symlink":
                    links.append(placed)
                    continue
                if placed.kind != "file":
                    yield placed, iter(())
                    continue
                chunks = _data(cast("_Readable", tar.fileobj), member, state, stream)
                yield placed, chunks
                for _ in chunks:  # what the caller left unread is read and counted still
                    pass
            if not isinstance(tar.ended_by, _END_OF_ARCHIVE):
                after = f"member {shown(state.last)}" if state.last else "its first header"
                raise BundleRejected(
                    f"it ends without its end-of-archive blocks after {after}: that "
                    "header's declared size does not match its data, or the archive is "
                    "truncated; pack it again with `cohort bundle push`"
                )
    except _UNREADABLE as exc:
        raise _unreadable(exc) from exc
    state.tree.finish()
    for placed in links:
        yield placed, iter(())


def _data(
    tar_stream: _Readable, member: tarfile.TarInfo, state: ArchiveRead, stream: _Decompressed
) -> Iterator[bytes]:
    """A regular member's data, read from the tar stream itself (never through tarfile's
    extraction), counted against the unpacked-bytes limit as each chunk is read."""
    limit = state.limits.max_unpacked_bytes
    too_big = BundleRejected(
        f"unpacks to more than {limit} bytes (the limit, COHORT_MAX_BUNDLE_UNPACKED_BYTES)"
    )
    if state.unpacked + member.size > limit:
        raise too_big
    if tar_stream.tell() != member.offset_data:
        raise BundleRejected(f"member {shown(member.name)} is not where its header says")
    left = member.size
    while left:
        try:
            chunk = tar_stream.read(min(left, _CHUNK))
        except _UNREADABLE as exc:
            raise _unreadable(exc) from exc
        if not chunk:
            raise BundleRejected(
                f"member {shown(member.name)} is truncated: its header "
                f"declares {member.size} bytes, the archive holds "
                f"{member.size - left}"
            )
        left -= len(chunk)
        state.unpacked += len(chunk)
        stream.data += len(chunk)
        if state.unpacked > limit:
            raise too_big
        yield chunk


def _unreadable(exc: BaseException) -> BundleRejected:
    return BundleRejected(f"not a readable .tar.gz archive ({exc})")


@contextmanager
def opened(source: str | os.PathLike[str] | IO[bytes]) -> Iterator[IO[bytes]]:
    """`source` as a binary file: a path opened (and closed after), a file object as is."""
    if isinstance(source, str | os.PathLike):
        with open(source, "rb") as handle:
            yield handle
    else:
        yield source
