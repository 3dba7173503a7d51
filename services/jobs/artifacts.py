"""A job's artifacts in the store: list them with their sha256, resolve and stream a download.

Every path is taken relative to the job's prefix (`jobs/<id>/`), normalised, and refused
if it is absolute or climbs out: a download never reads another job's files.

sha256: computed by streaming each file the first time it is listed, then kept in a
small per-process cache keyed by (store, key, size, version): S3's ETag, a local file's
inode and mtime. Listing is what users do after a run, once or twice, while the files no
longer change; a rewrite (a checkpoint updated in place) changes the version, so a
cached digest is never one of older bytes (S3's whole-second times could not tell).
Storing digests beside the files would need every writer (agents) to keep them.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from threading import Lock
from typing import IO

from cachetools import LRUCache

from services.exceptions import ArtifactNotFound, InvalidArtifactPath, UnsatisfiableRange
from services.storage import keys
from services.storage.store import ArtifactStore

CHUNK = 1 << 20
_CACHE_SIZE = 4096
_digests: LRUCache[tuple[str, str, int, str], str] = LRUCache(maxsize=_CACHE_SIZE)
_digests_lock = Lock()


@dataclass(frozen=True)
class ArtifactFile:
    path: str  # relative to jobs/<id>/
    size: int
    sha256: str


@dataclass(frozen=True)
class Download:
    """What a download path names: one file (`key`) or a directory (`prefix`)."""

    name: str  # the file name, or the directory's name with .tar.gz
    key: str | None = None
    prefix: str | None = None
    base: str = ""  # a directory's entries are named relative to this (the job's prefix)
    size: int | None = None
    handle: IO[bytes] | None = None  # a file's, opened: what is sent is what was sized


def _sha256(store: ArtifactStore, key: str, size: int, version: str) -> str:
    ident = (store.url, key, size, version)
    with _digests_lock:
        known = _digests.get(ident)
    if known is not None:
        return known
    digest = hashlib.sha256()
    with store.open_read(key) as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    value = digest.hexdigest()
    if version.strip(":"):  # a backend without versions cannot tell a rewrite: no caching
        with _digests_lock:
            _digests[ident] = value
    return value


def list_artifacts(*, store: ArtifactStore, job_id: int, path: str = "") -> list[ArtifactFile]:
    """Every file of the job (with `path`, a directory of it: only the files under it), by
    path relative to `jobs/<id>/`, with size and sha256. Only the files listed are hashed:
    a client following one directory (`cohort tensorboard`: `tensorboard`) while the job
    runs does not hash its checkpoints at every look.

    Raises:
        InvalidArtifactPath: see normalise_path.
    """
    return list_under(store=store, base=keys.job_prefix(job_id), path=path)


def list_under(*, store: ArtifactStore, base: str, path: str = "") -> list[ArtifactFile]:
    """Every file under the store's prefix `base` (a job's, a model version's), or under
    its directory `path`, by path relative to `base`, with size and sha256.

    Raises:
        InvalidArtifactPath: see normalise_path.
    """
    rel = normalise_path(path)
    return [
        ArtifactFile(
            path=key[len(base) + 1 :], size=size, sha256=_sha256(store, key, size, version)
        )
        for key, size, version in store.list_versions(f"{base}/{rel}" if rel else base)
    ]


# What each top directory of a job's artifacts holds, in the order a page shows them.
GROUPS = ("model", "checkpoints", "tensorboard", "logs")


def group_artifacts(*, store: ArtifactStore, job_id: int) -> dict[str, list[tuple[str, int]]]:
    """(path, size) of the job's files by group (GROUPS, then "other"), without digests:
    cheap enough for a page that refreshes while the job runs."""
    prefix = keys.job_prefix(job_id)
    groups: dict[str, list[tuple[str, int]]] = {}
    for key, size in store.list(prefix):
        path = key[len(prefix) + 1 :]
        top = path.split("/", 1)[0]
        groups.setdefault(top if top in GROUPS else "other", []).append((path, size))
    return {name: groups[name] for name in (*GROUPS, "other") if name in groups}


def normalise_path(path: str) -> str:
    """The path relative to the job's prefix ('' for all of it).

    Raises:
        InvalidArtifactPath: absolute, `..` out of the job, a backslash or a control byte.
    """
    if path.startswith("/"):
        raise InvalidArtifactPath(
            path, "give a path relative to the job's artifacts, such as 'model'"
        )
    norm = posixpath.normpath(path) if path else "."
    if norm == ".." or norm.startswith("../"):
        raise InvalidArtifactPath(path, "it leaves the job's artifacts")
    rel = "" if norm == "." else norm
    try:  # the store's own rule for a key (DEL is a control character too)
        keys.check_key(rel, allow_empty=True)
    except keys.InvalidKey:
        raise InvalidArtifactPath(path, "no backslashes or control characters") from None
    return rel


def resolve_download(*, store: ArtifactStore, job_id: int, path: str) -> Download:
    """What `path` of the job names.

    Raises:
        InvalidArtifactPath: see normalise_path.
        ArtifactNotFound: neither a file nor a directory of the job.
    """
    found = resolve_under(
        store=store, base=keys.job_prefix(job_id), path=path, whole=f"job-{job_id}"
    )
    if found is None:
        raise ArtifactNotFound(job_id, normalise_path(path) or ".")
    return found


def resolve_under(*, store: ArtifactStore, base: str, path: str, whole: str) -> Download | None:
    """What `path` under the store's prefix `base` names (`whole`: the archive's name for
    all of it); None: neither a file nor a directory.

    Raises:
        InvalidArtifactPath: see normalise_path.
    """
    rel = normalise_path(path)
    key = f"{base}/{rel}" if rel else base
    if rel:
        # Opened, not looked at then opened: a checkpoint mirrored while it is asked for is
        # replaced, or removed, between two such steps (a 500, or a Content-Length that
        # was another version's).
        try:
            handle, size = store.open_sized(key)
        except FileNotFoundError:
            pass
        else:
            return Download(name=posixpath.basename(rel), key=key, size=size, handle=handle)
    if store.list(key):
        name = posixpath.basename(rel) if rel else whole
        return Download(name=f"{name}.tar.gz", prefix=key, base=base)
    return None


# RFC 9110 14.1.2, one range: first-last, first- (to the end), -N (the last N bytes).
# Twenty digits at most: past the size of any file, and never a costly int().
_BYTE_RANGE = re.compile(r"bytes=(\d{0,20})-(\d{0,20})")


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(start, end), end excluded, of the bytes a Range header asks of a file of `size`
    bytes; None for the whole file: no header, or one this server ignores as RFC 9110 lets
    it (another unit, several ranges, a malformed or backwards one). A client following a
    file that grows (`cohort tensorboard`: an event file) asks for what it lacks.

    Raises:
        UnsatisfiableRange: a range that starts at or past the end (answered 416).
    """
    match = _BYTE_RANGE.fullmatch(header.strip()) if header else None
    if match is None or match.group(1) == match.group(2) == "":
        return None
    assert header is not None
    first, last = match.groups()
    if first == "":  # the last N bytes
        if int(last) == 0 or size == 0:
            raise UnsatisfiableRange(header, size)
        return max(0, size - int(last)), size
    start = int(first)
    if last and int(last) < start:
        return None
    if start >= size:
        raise UnsatisfiableRange(header, size)
    return start, size if last == "" else min(size, int(last) + 1)


def stream_file(handle: IO[bytes], end: int, start: int = 0) -> Iterator[bytes]:
    """Bytes start..end of an opened object (end: at most its size when opened), a chunk
    at a time; closed at the end."""
    with handle:
        if start:
            handle.seek(start)
        sent = start
        while sent < end and (chunk := handle.read(min(CHUNK, end - sent))):
            sent += len(chunk)
            yield chunk


def stream_tar_gz(store: ArtifactStore, prefix: str, base: str) -> Iterator[bytes]:
    """A .tar.gz of every file under `prefix`, named relative to `base` (the job's prefix:
    a download of `model` unpacks into `model/`), built while it is sent: one chunk in
    memory at a time, whatever the files' sizes."""
    gzip = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: a gzip stream
    for key, size in store.list(prefix):
        info = tarfile.TarInfo(key[len(base) + 1 :])
        info.size, info.mode, info.mtime = size, 0o644, 0
        yield gzip.compress(info.tobuf(format=tarfile.PAX_FORMAT))
        sent = 0
        with store.open_read(key) as handle:
            # Exactly the size the header declares, even if the file changed since the
            # listing (a checkpoint rewritten meanwhile): the archive stays readable.
            while sent < size and (chunk := handle.read(min(CHUNK, size - sent))):
                sent += len(chunk)
                yield gzip.compress(chunk)
        padding = (size - sent) + (-size % tarfile.BLOCKSIZE)
        yield gzip.compress(b"\0" * padding)
    yield gzip.compress(b"\0" * (2 * tarfile.BLOCKSIZE)) + gzip.flush()
