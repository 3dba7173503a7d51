"""A transfer's bytes: what an upload sends in chunks, each counted for a progress bar,
and what a ranged download keeps."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO, Protocol, runtime_checkable


@runtime_checkable
class Sink(Protocol):
    """Where a download goes when it is not a path: a binary file open for writing."""

    def write(self, data: bytes, /) -> object: ...


CHUNK = 1 << 20
# What a spec's `bundle` is while its code is not uploaded yet: the server checks the
# rest of the spec (`bundle_pending`), and knows a bundle will be there.
PENDING_BUNDLE = "sha256:" + "0" * 64


def file_body(handle: BinaryIO, progress: Callable[[int], None] | None) -> Iterator[bytes]:
    """The file's bytes in chunks, calling `progress(len(chunk))` as each is sent."""
    while chunk := handle.read(CHUNK):
        yield chunk
        if progress is not None:
            progress(len(chunk))


def ranged_chunks(
    chunks: Iterable[bytes], skip: int, end: int | None, start: int
) -> Iterator[bytes]:
    """The chunks of a download with `skip` bytes dropped from the front (a server that
    ignored the Range sent from 0) and cut at `end` - `start` bytes in all."""
    left = None if end is None else end - start
    for chunk in chunks:
        chunk, skip = chunk[skip:], max(0, skip - len(chunk))
        if left is not None:
            chunk, left = chunk[:left], max(0, left - len(chunk))
        if chunk:
            yield chunk
