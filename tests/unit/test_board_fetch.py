"""`cohort tensorboard`'s fetch (cli/board_fetch.py) against a listing the test makes up:
the server's paths are untrusted, so a path that would land outside the job's directory
of the logdir (`..`, absolute, another group, a backslash, a control character, a link
already there on the way) is refused and reported, never written; a link in place of a
file is replaced, never written through; the good files of the same listing are written."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from cli.board_fetch import BoardFetcher, BoardSource, UnsafePath, local_path
from cohort.errors import ApiError

GOOD = b"an event file"


class FakeSource(BoardSource):
    """A listing of `files` (path -> bytes), each served whole or in part as asked."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.served = files
        self.gone: set[str] = set()  # listed, then removed before it is fetched
        self.fetched: list[tuple[str, int, int]] = []

    def status(self, job_id: int) -> str:  # noqa: ARG002
        return "running"

    def files(self, job_id: int) -> list[dict[str, Any]]:  # noqa: ARG002
        return [
            {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for path, data in self.served.items()
        ]

    def fetch(self, job_id: int, path: str, out: Any, start: int = 0, end: int = 0) -> None:  # noqa: ARG002
        self.fetched.append((path, start, end))
        if path in self.gone:
            raise ApiError(404, {"message": f"job {job_id} has no artifact {path!r}"})
        data = self.served[path]
        out.write(data[start : end or len(data)])


@pytest.mark.parametrize(
    "path",
    [
        "tensorboard/../../outside/secret",
        "tensorboard/replica-0/../../../outside/secret",
        "/etc/passwd",
        "tensorboard//etc/passwd",
        "tensorboard/./x",
        "tensorboard/replica-0/..",
        "tensorboard",
        "tensorboard/",
        "model/saved_model.pb",
        "../tensorboard/x",
        "tensorboard/a\\..\\..\\b",
        "tensorboard/replica-0/a\x00b",
        "tensorboard/replica-0/\x7f",
    ],
)
def test_a_path_out_of_the_jobs_directory_is_refused(path: str) -> None:
    with pytest.raises(UnsafePath):
        local_path(7, path)


def test_paths_map_to_one_run_per_job_and_replica() -> None:
    assert local_path(7, "tensorboard/replica-0/events.out.tfevents.1") == (
        "job-7/replica-0/events.out.tfevents.1"
    )
    assert local_path(7, "tensorboard/replica-1/plugins/profile/2026_11_29/h.xplane.pb") == (
        "job-7/replica-1/plugins/profile/2026_11_29/h.xplane.pb"
    )


def test_a_hostile_listing_writes_nothing_outside_the_logdir(tmp_path: Path) -> None:
    logdir, outside = tmp_path / "logdir", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"the user's")
    replica = logdir / "job-7" / "replica-0"
    replica.mkdir(parents=True)
    # Links already in the logdir (another program's, or a user's mistake): a directory
    # on the way to a file, and a file's own name.
    (replica / "dir").symlink_to(outside)
    (replica / "events.out.tfevents.2").symlink_to(outside / "secret")
    source = FakeSource(
        {
            "tensorboard/../../outside/secret": b"overwritten",
            "/tmp/x": b"overwritten",
            "model/saved_model.pb": b"another group",
            "tensorboard/replica-0/dir/secret": b"overwritten",
            "tensorboard/replica-0/events.out.tfevents.2": b"in place of the link",
            "tensorboard/replica-0/events.out.tfevents.1": GOOD,
        }
    )
    fetched = BoardFetcher(source, logdir).fetch(7)
    assert (outside / "secret").read_bytes() == b"the user's"
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert fetched.files == 6
    assert sorted(fetched.downloaded) == [
        "job-7/replica-0/events.out.tfevents.1",
        "job-7/replica-0/events.out.tfevents.2",
    ]
    assert (replica / "events.out.tfevents.1").read_bytes() == GOOD
    link_place = replica / "events.out.tfevents.2"
    assert not link_place.is_symlink() and link_place.read_bytes() == b"in place of the link"
    refused = "\n".join(fetched.refused)
    for path in (
        "tensorboard/../../outside/secret",
        "/tmp/x",
        "model/saved_model.pb",
        "tensorboard/replica-0/dir/secret",
    ):
        assert repr(path) in refused, refused
    assert len(fetched.refused) == 4
    # Only what was written was fetched: the refused paths were never even asked for.
    assert {path for path, _, _ in source.fetched} == {
        "tensorboard/replica-0/events.out.tfevents.1",
        "tensorboard/replica-0/events.out.tfevents.2",
    }


def test_a_file_removed_after_the_listing_is_skipped(tmp_path: Path) -> None:
    source = FakeSource(
        {"tensorboard/replica-0/gone": b"x", "tensorboard/replica-0/events.out.tfevents.1": GOOD}
    )
    source.gone.add("tensorboard/replica-0/gone")
    fetched = BoardFetcher(source, tmp_path).fetch(7)
    assert fetched.downloaded == ["job-7/replica-0/events.out.tfevents.1"]
    assert not fetched.refused and not (tmp_path / "job-7" / "replica-0" / "gone").exists()
