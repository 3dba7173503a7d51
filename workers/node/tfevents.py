"""Read TensorBoard event files incrementally, without TensorFlow.

tf.summary writes `events.out.tfevents.*` files: TFRecord-framed `Event` protos,
each record `u64 length | u32 masked crc32c(length) | data | u32 masked crc32c(data)`
(little-endian). `EventFileReader` follows one such file while it is written: a
record not yet complete at the end of the file is read again on the next call.

The agent imports this module, never TensorFlow (it forks; see launcher.py): the
`Event` classes come from the `tensorboard` package, whose protos and tensor_util
stand alone, and CRCs are checked with `crc32c`. Not tensorboard's own loaders,
gfile or writers: where TensorFlow is installed they load it (tensorboard.compat.tf).
"""

from __future__ import annotations

import logging
import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import crc32c
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.util import tensor_util

from cohort.metrics import MAX_NAME, MAX_STEP
from services.storage.owned_tree import OwnedTree
from services.wire.batches import Point

log = logging.getLogger("cohort.tfevents")

HEADER = struct.Struct("<QI")  # length, masked crc of the length
FOOTER = struct.Struct("<I")  # masked crc of the data
READ_BYTES = 4 << 20  # per call and file: bounds memory and the time a poll takes
MAX_RECORD = 256 << 20  # a longer "length" means the framing is corrupt
SCALARS_PLUGIN = "scalars"


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC32C of `data`."""
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@dataclass
class EventFileReader:
    """Follows one event file: each `read()` returns the events appended since the last.

    A corrupt length header ends the file (nothing after it can be framed); a record
    whose data fails its CRC or does not parse is skipped with a warning.
    """

    path: Path
    prefix: str = ""  # prepended to tags: the run (subdirectory) the file belongs to
    tree: OwnedTree | None = None  # the replica's directory it lies in (None: its parent)
    offset: int = 0
    broken: bool = False
    skipped: int = 0  # records dropped as corrupt
    _plugins: dict[str, str] = field(default_factory=dict)  # tag -> plugin, first seen
    _refused: set[str] = field(default_factory=set)  # names warned about

    def read(self) -> list[event_pb2.Event]:
        """The complete events written since the last call (possibly none)."""
        if self.broken:
            return []
        data, size = self._read_bytes()
        events, position = [], 0
        while (record := self._next_record(data, position)) is not None:
            payload, position = record
            event = self._parse(payload)
            if event is not None:
                events.append(event)
        self.offset += position
        if position == 0 and not self.broken:
            self._pass_oversized(data, size)
        return events

    def _read_bytes(self) -> tuple[bytes, int]:
        """Up to READ_BYTES from the offset on, and the file's size."""
        # The replica owns this tree: a link it swapped in for the file or a directory
        # above it must not make the agent read some other file, nor a fifo hang it.
        tree = self.tree or OwnedTree(self.path.parent)
        try:
            fd = tree.open(self.path.relative_to(tree.root).as_posix())
        except (OSError, ValueError):
            return b"", 0  # removed, refused or not readable yet: try again later
        with os.fdopen(fd, "rb") as handle:
            handle.seek(self.offset)
            return handle.read(READ_BYTES), os.fstat(fd).st_size

    def _pass_oversized(self, data: bytes, size: int) -> None:
        """Step over a whole record longer than a read (an image, a graph: no scalar)
        rather than hold it in memory, or wait for it forever."""
        if len(data) < HEADER.size:
            return
        (length, _) = HEADER.unpack_from(data)  # its CRC was checked by _next_record
        total = HEADER.size + length + FOOTER.size
        if total > READ_BYTES and self.offset + total <= size:
            log.info(
                "%s: passing over a record of %d bytes at byte %d", self.path, length, self.offset
            )
            self.offset += total

    def _next_record(self, data: bytes, start: int) -> tuple[bytes | None, int] | None:
        """(payload or None if corrupt, end) of the record at `start`; None if incomplete."""
        if len(data) - start < HEADER.size:
            return None
        length, length_crc = HEADER.unpack_from(data, start)
        header = data[start : start + 8]
        if masked_crc(header) != length_crc or length > MAX_RECORD:
            self.broken = True
            log.warning(
                "%s: corrupt record header at byte %d; not reading it further",
                self.path,
                self.offset + start,
            )
            return None
        end = start + HEADER.size + length + FOOTER.size
        if end > len(data):
            return None  # still being written (or longer than this read): next time
        payload = data[start + HEADER.size : end - FOOTER.size]
        (data_crc,) = FOOTER.unpack_from(data, end - FOOTER.size)
        if masked_crc(payload) != data_crc:
            self._skip(f"record at byte {self.offset + start} fails its CRC")
            return None, end
        return payload, end

    def _parse(self, payload: bytes | None) -> event_pb2.Event | None:
        if payload is None:
            return None
        try:
            return event_pb2.Event.FromString(payload)
        except DecodeError:
            self._skip(f"a record near byte {self.offset} is not an Event")
            return None

    def _skip(self, why: str) -> None:
        self.skipped += 1
        if self.skipped == 1 or self.skipped % 100 == 0:
            log.warning("%s: %s; skipped (%d so far)", self.path, why, self.skipped)

    def scalars(self, event: event_pb2.Event) -> list[Point]:
        """The scalar values of one event, named `<prefix><tag>`, at the event's wall
        time (no epoch: TensorBoard events have none)."""
        found = []
        for value in event.summary.value:
            number = self._scalar_value(value)
            if number is None or not math.isfinite(number):
                continue
            name = self.prefix + value.tag
            if self._storable(name, event.step):
                found.append(Point(int(event.step), None, name, number, float(event.wall_time)))
        return found

    def _storable(self, name: str, step: int) -> bool:
        # The bounds of the SQL columns: the ingest would drop such a point without a word.
        if 0 < len(name) <= MAX_NAME and 0 <= step <= MAX_STEP:
            return True
        if name not in self._refused:
            self._refused.add(name)
            log.warning(
                "%s: scalar %r at step %d not shipped: names are 1..%d characters and steps 0..%d",
                self.path,
                name[:80],
                step,
                MAX_NAME,
                MAX_STEP,
            )
        return False

    def _scalar_value(self, value: summary_pb2.Summary.Value) -> float | None:
        kind = value.WhichOneof("value")
        if kind == "simple_value":  # TF1 tf.summary.scalar, tf.compat.v1 writers
            return float(value.simple_value)
        if kind != "tensor":
            return None
        # TF2 writes a tensor; its plugin says what it is. Writers may send the
        # metadata with a tag's first value only, so it is remembered per tag.
        plugin = value.metadata.plugin_data.plugin_name
        if plugin:
            self._plugins.setdefault(value.tag, plugin)
        if self._plugins.get(value.tag) != SCALARS_PLUGIN:
            return None
        try:
            array = tensor_util.make_ndarray(value.tensor)
        except (TypeError, ValueError):
            return None
        if array.size != 1 or array.dtype.kind not in "fiu":
            return None
        return float(array.reshape(()))
