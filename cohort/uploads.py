"""What an upload sends: a file's bytes in chunks, each counted for a progress bar."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import BinaryIO

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
