"""The agent's TensorBoard reader on event files a real TensorFlow process wrote."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from services.wire.batches import Point
from tests.tfsummaries import expected_scalars, write_summaries
from workers.node.replica_files import ReplicaFollower
from workers.node.tfevents import HEADER, READ_BYTES, EventFileReader

STEPS = 5


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One TensorFlow run for the module (importing TF takes seconds)."""
    directory = tmp_path_factory.mktemp("tensorboard")
    write_summaries(directory, STEPS)
    return directory


def root_file(directory: Path) -> Path:
    (path,) = directory.glob("events.out.tfevents.*")
    return path


def triples(points: list[Point]) -> set[tuple[int, str, float]]:
    return {(p.step, p.name, p.value) for p in points}


def follow(directory: Path) -> tuple[ReplicaFollower, list[Point]]:
    points: list[Point] = []
    follower = ReplicaFollower(
        on_point=points.append, tensorboard_dir=directory, skip_existing=False
    )
    return follower, points


def record_ends(data: bytes) -> list[int]:
    """Byte offsets where each TFRecord of `data` ends."""
    ends, position = [], 0
    while position < len(data):
        (length, _) = HEADER.unpack_from(data, position)
        position += HEADER.size + length + 4
        ends.append(position)
    return ends


def test_every_scalar_tf_summary_writes_is_read_with_its_step_and_value(written: Path) -> None:
    follower, points = follow(written)
    assert follower.poll() == len(points) == 5 * STEPS
    # TF2 tensors (float32 and float64), TF1 simple values, runs named by subdirectory;
    # the histogram is no scalar.
    assert triples(points) == expected_scalars(STEPS)
    assert all(p.ts > 1e9 for p in points)
    assert follower.last_progress is not None
    assert follower.poll() == 0  # nothing is read twice


def test_a_file_growing_while_read_yields_every_record_once(written: Path, tmp_path: Path) -> None:
    data = root_file(written).read_bytes()
    growing = tmp_path / "events.out.tfevents.1.growing"
    reader = EventFileReader(growing)
    points: list[Point] = []
    with open(growing, "wb") as handle:
        for start in range(0, len(data), 7):  # every record is cut somewhere
            handle.write(data[start : start + 7])
            handle.flush()
            for event in reader.read():
                points.extend(reader.scalars(event))
    assert reader.offset == len(data) and reader.skipped == 0 and not reader.broken
    whole = EventFileReader(root_file(written))
    assert points == [s for event in whole.read() for s in whole.scalars(event)]
    assert len(points) == 3 * STEPS


def test_a_truncated_last_record_is_read_once_complete(written: Path, tmp_path: Path) -> None:
    data = root_file(written).read_bytes()
    last_start = record_ends(data)[-2]
    path = tmp_path / "events.out.tfevents.2.cut"
    path.write_bytes(data[:-5])
    reader = EventFileReader(path)
    first = reader.read()
    assert reader.offset == last_start  # the cut record waits, unread
    with open(path, "ab") as handle:
        handle.write(data[-5:])
    assert len(reader.read()) == 1 and reader.offset == len(data)
    assert len(first) + 1 == len(EventFileReader(root_file(written)).read())


def test_a_record_failing_its_crc_is_skipped_and_the_rest_read(
    written: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = bytearray(root_file(written).read_bytes())
    ends = record_ends(bytes(data))
    data[ends[1] + HEADER.size + 2] ^= 0xFF  # inside the third record's payload
    path = tmp_path / "events.out.tfevents.3.crc"
    path.write_bytes(bytes(data))
    reader = EventFileReader(path)
    with caplog.at_level(logging.WARNING):
        events = reader.read()
    assert len(events) == len(ends) - 1 and reader.skipped == 1
    assert reader.offset == len(data) and "fails its CRC" in caplog.text


def test_a_corrupt_header_stops_that_file_only(
    written: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shutil.copytree(written, tmp_path / "tb")
    path = root_file(tmp_path / "tb")
    data = bytearray(path.read_bytes())
    data[record_ends(bytes(data))[3]] ^= 0x01  # the fifth record's length
    path.write_bytes(bytes(data))
    follower, points = follow(tmp_path / "tb")
    with caplog.at_level(logging.WARNING):
        follower.poll()
    names = {p.name for p in points}
    assert {"train/epoch_loss", "validation/epoch_loss"} <= names  # the other files
    assert len([p for p in points if p.name in ("loss", "lr64", "legacy")]) < 3 * STEPS
    assert "corrupt record header" in caplog.text
    follower.poll()  # and the broken file is not retried over and over
    assert caplog.text.count("corrupt record header") == 1


def test_summaries_other_than_scalars_are_progress_and_headers_are_not(
    written: Path, tmp_path: Path
) -> None:
    from tensorboard.compat.proto import event_pb2

    histograms = [
        e
        for e in EventFileReader(root_file(written)).read()
        if any(v.tag == "weights" for v in e.summary.value)
    ]
    follower, points = follow(tmp_path)
    write_events(tmp_path, [event_pb2.Event(wall_time=1e9, file_version="brain.Event:2")])
    follower.poll()
    assert follower.last_progress is None
    write_events(tmp_path, histograms, name="events.out.tfevents.2.histograms")
    follower.poll()
    assert points == [] and follower.last_progress is not None


def test_files_changing_in_a_watched_directory_are_progress(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "restored.index").write_bytes(b"x")
    follower = ReplicaFollower(on_point=lambda _: None, watch_dirs=[checkpoints])
    follower.poll()
    assert follower.last_progress is None  # what was there before it ran is no sign
    (checkpoints / "ckpt-1").mkdir()
    (checkpoints / "ckpt-1" / "data").write_bytes(b"weights")
    follower.poll()
    assert follower.last_progress is not None


def test_the_agent_side_never_imports_tensorflow(written: Path) -> None:
    # tensorboard's own gfile and writers load TensorFlow when it is installed:
    # reading and decoding real files here must not go near them.
    code = (
        "import sys; from pathlib import Path; from workers.node.replica_files import "
        "ReplicaFollower; points = []; ReplicaFollower(on_point=points.append, "
        "tensorboard_dir=Path(sys.argv[1]), skip_existing=False).poll(); "
        "print(len(points), sorted(m for m in sys.modules if m.split('.')[0] in "
        "('tensorflow', 'keras', 'tf_keras')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(written)], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == f"{5 * STEPS} []"


def write_events(
    directory: Path, events: list[Any], name: str = "events.out.tfevents.1.written"
) -> None:
    """Frame `events` with the tensorboard package's own record writer (not ours)."""
    from tensorboard.summary.writer.record_writer import RecordWriter

    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / name, "ab") as handle:
        writer = RecordWriter(handle)
        for event in events:
            writer.write(event.SerializeToString())
        writer.flush()


def scalar_event(step: int, tag: str, value: float) -> Any:
    from tensorboard.compat.proto import event_pb2, summary_pb2

    return event_pb2.Event(
        step=step,
        wall_time=1e9,
        summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]),
    )


def test_a_record_longer_than_a_read_is_passed_over(tmp_path: Path) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2

    image = summary_pb2.Summary.Image(encoded_image_string=b"x" * (READ_BYTES + 100))
    big = event_pb2.Event(
        step=1,
        summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="picture", image=image)]),
    )
    write_events(tmp_path, [scalar_event(1, "loss", 1.0), big, scalar_event(2, "loss", 0.5)])
    follower, points = follow(tmp_path)
    for _ in range(4):
        follower.poll()
    assert triples(points) == {(1, "loss", 1.0), (2, "loss", 0.5)}


def test_scalars_the_store_cannot_hold_are_dropped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_events(
        tmp_path,
        [
            scalar_event(1, "x" * 65, 1.0),
            scalar_event(-1, "loss", 1.0),
            scalar_event(2**31, "loss", 1.0),
            scalar_event(3, "loss", 3.0),
        ],
    )
    follower, points = follow(tmp_path)
    with caplog.at_level(logging.WARNING):
        follower.poll()
    assert triples(points) == {(3, "loss", 3.0)}
    assert "not shipped" in caplog.text


def test_files_of_an_earlier_attempt_are_neither_metrics_nor_progress(
    written: Path, tmp_path: Path
) -> None:
    shutil.copytree(written, tmp_path / "tb")
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "metrics": {"a": 1}}\n')
    points: list[Point] = []
    follower = ReplicaFollower(
        on_point=points.append,
        tensorboard_dir=tmp_path / "tb",
        metrics_file=tmp_path / "metrics.jsonl",
    )
    follower.poll()
    assert points == [] and follower.last_progress is None
    write_events(tmp_path / "tb", [scalar_event(7, "loss", 0.125)])  # the new process
    with open(tmp_path / "metrics.jsonl", "a") as handle:
        handle.write('{"step": 8, "metrics": {"a": 2}}\n')
    follower.poll()
    assert triples(points) == {(7, "loss", 0.125), (8, "a", 2.0)}
    assert follower.last_progress is not None
