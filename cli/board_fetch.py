"""A job's TensorBoard files fetched from Cohort's API into a local directory, only what is
new (`cohort tensorboard`, cli/tensorboard.py).

Layout: `tensorboard/replica-<i>/...` of job N (the agent's copy of each replica's
$COHORT_TENSORBOARD_DIR: event files, `plugins/profile/...`) goes to
`<logdir>/job-N/replica-<i>/...`, one TensorBoard run per job and replica.

What is new: the API lists each file with its size and sha256; a file whose local copy has
the same digest is not fetched again. An event file that grew since (TensorFlow only ever
appends to one) gets the bytes it lacks appended, fetched with a Range: TensorBoard holds
an event file open and reads on from where it was, so a copy renamed over it would never
be read. Every other file, and an event file that is not what it was plus more, is fetched
whole into a file beside it and renamed into place: a reader never sees half of one.
New bytes are appended only once their digest, on top of the local file's, is the listed
sha256: a rewritten event file (never TensorFlow's doing) is fetched whole instead.

The paths are the server's: each must be a plain relative path under `tensorboard/`
(no `..`, no absolute path, no backslash or control character), and the files are written
through an `OwnedTree` of the logdir, which follows no link on the way or in place of a
file. A path refused is reported and skipped, never written.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cohort.client import Client
from cohort.errors import ApiError
from cohort.uploads import Sink
from services.statuses import TERMINAL_STATUSES
from services.storage import keys
from services.storage.owned_tree import OwnedTree

GROUP = "tensorboard"  # the job's directory of TensorBoard files (services/storage/keys.py)
EVENT_FILE = "events.out.tfevents."  # the prefix of every event file's name
CHUNK = 1 << 20


class UnsafePath(ValueError):
    """An artifact path that would be written outside the job's directory of the logdir."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path!r}: {why}")
        self.path, self.why = path, why


def local_path(job_id: int, path: str) -> str:
    """Where the artifact `path` of job `job_id` goes, relative to the logdir:
    `tensorboard/replica-0/x` -> `job-<id>/replica-0/x`.

    Raises:
        UnsafePath: not under `tensorboard/`, absolute, a `.`/`..`/empty segment, a
            backslash or a control character.
    """
    head, _, rest = path.partition("/")
    if head != GROUP or not rest:
        raise UnsafePath(path, f"not a file under {GROUP}/")
    try:
        keys.check_key(rest)
    except keys.InvalidKey as exc:
        raise UnsafePath(path, str(exc)) from None
    return f"job-{int(job_id)}/{rest}"


class BoardSource:
    """The calls of Cohort's API that `cohort tensorboard` makes, all of them: the one
    place to change if the client does."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def status(self, job_id: int) -> str:
        return self.client.job(job_id).status

    def files(self, job_id: int) -> list[dict[str, Any]]:
        """path, size and sha256 of each of the job's TensorBoard files."""
        return [item.to_dict() for item in self.client.artifacts(job_id, path=GROUP)]

    def fetch(self, job_id: int, path: str, out: Sink, start: int = 0, end: int = 0) -> None:
        """Bytes start..end (end excluded; 0: to the end) of a file, written to `out`."""
        self.client.download(job_id, path, out, start=start, end=end or None)


def is_final(status: str) -> bool:
    return status in TERMINAL_STATUSES


class _Hashing:
    """A writable file that hashes what goes through it."""

    def __init__(self, out: Sink, digest: Any) -> None:
        self.out, self.digest = out, digest

    def write(self, data: bytes, /) -> int:
        self.digest.update(data)
        self.out.write(data)
        return len(data)


def _identity(info: os.stat_result) -> tuple[int, int, int]:
    """What changes whenever a local file's bytes do (every write here goes through this
    process, which notes the new identity)."""
    return info.st_ino, info.st_size, info.st_mtime_ns


@dataclass
class Fetched:
    """What one fetch of a job did, by local path (relative to the logdir)."""

    files: int = 0  # listed
    downloaded: list[str] = field(default_factory=list)  # fetched whole
    appended: list[str] = field(default_factory=list)  # fetched the bytes they lacked
    refused: list[str] = field(default_factory=list)  # the server's paths not written: why


class BoardFetcher:
    """Keeps `logdir` up to date with the jobs' TensorBoard files."""

    def __init__(self, source: BoardSource, logdir: Path) -> None:
        self.source = source
        self.tree = OwnedTree(logdir)
        # local path -> (the file's identity when hashed, the hash of its bytes so far):
        # an unchanged file is not read again, an appended one is hashed on from there.
        self._hashes: dict[str, tuple[tuple[int, int, int], Any]] = {}

    def fetch(self, job_id: int) -> Fetched:
        """Fetch what is new of the job's files.

        Raises:
            ApiError, httpx.TransportError: the API refused or could not be reached.
        """
        done = Fetched()
        for item in self.source.files(job_id):
            done.files += 1
            try:
                rel = local_path(job_id, str(item["path"]))
                how = self._fetch_one(job_id, item, rel)
            except UnsafePath as exc:
                done.refused.append(str(exc))
                continue
            except OSError as exc:  # a link on the way, a file where a directory is
                done.refused.append(f"{item['path']!r}: cannot be written here: {exc}")
                continue
            except ApiError as exc:
                if exc.status == 404:  # gone since it was listed: nothing to fetch
                    continue
                raise
            if how is not None:
                (done.appended if how == "appended" else done.downloaded).append(rel)
        return done

    def _fetch_one(self, job_id: int, item: dict[str, Any], rel: str) -> str | None:
        """Bring one file up to date: None if it was, else "appended" or "downloaded"."""
        path, size, sha256 = str(item["path"]), int(item["size"]), str(item["sha256"])
        held = self._digest(rel)
        if held is not None and held[0] == sha256:
            return None
        if (
            held is not None
            and posixpath.basename(rel).startswith(EVENT_FILE)
            and held[1] < size
            and self._append(job_id, path, rel, held[1], size, sha256)
        ):
            return "appended"
        digest = hashlib.sha256()
        written = self.tree.replace(
            rel, lambda out: self.source.fetch(job_id, path, _Hashing(out, digest))
        )
        self._hashes[rel] = (_identity(written), digest)
        return "downloaded"

    def _append(self, job_id: int, path: str, rel: str, start: int, end: int, sha256: str) -> bool:
        """Append bytes start..end of the stored file to the local one (hashed so far:
        `_digest`) if the result is the stored file (`sha256`): the new bytes are fetched
        aside first, so a file that is not its old self plus more never gets them.
        False (nothing written) if not, or if the API refused the range (it shrank)."""
        digest = self._hashes[rel][1].copy()
        with tempfile.SpooledTemporaryFile(max_size=16 * CHUNK) as tail:
            try:
                self.source.fetch(job_id, path, _Hashing(tail, digest), start, end)
            except ApiError as exc:
                if exc.status != 416:
                    raise
                return False
            if digest.hexdigest() != sha256:
                return False
            tail.seek(0)
            written = self.tree.append(rel, lambda out: shutil.copyfileobj(tail, out, CHUNK))
        self._hashes[rel] = (_identity(written), digest)
        return True

    def _digest(self, rel: str) -> tuple[str, int] | None:
        """(sha256, size) of the local file `rel`, or None if it is not a regular file of
        the logdir's owner (missing, a link: replaced, never followed)."""
        here = self.tree.lstat(rel)
        if here is None:
            return None
        cached = self._hashes.get(rel)
        if cached is None or cached[0] != _identity(here):
            try:
                fd = self.tree.open(rel)
            except OSError:
                return None
            digest = hashlib.sha256()
            with open(fd, "rb") as handle:
                identity = _identity(os.fstat(fd))
                while chunk := handle.read(CHUNK):
                    digest.update(chunk)
            self._hashes[rel] = cached = (identity, digest)
        return str(cached[1].hexdigest()), cached[0][1]
