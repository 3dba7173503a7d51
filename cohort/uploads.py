"""A transfer's bytes: what an upload sends in chunks, each counted for a progress bar,
and what a ranged download keeps."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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


class RangeCut:
    """What a ranged download keeps of each chunk, in order: `skip` bytes dropped from the
    front (a server that ignored the Range sent from 0), and no more than `end` - `start`
    bytes in all."""

    def __init__(self, skip: int, start: int, end: int | None) -> None:
        self.skip = skip
        self.left = None if end is None else end - start

    def __call__(self, chunk: bytes) -> bytes:
        chunk, self.skip = chunk[self.skip :], max(0, self.skip - len(chunk))
        if self.left is not None:
            chunk, self.left = chunk[: self.left], max(0, self.left - len(chunk))
        return chunk
