"""ArtifactStore: one interface over a local directory and any S3-compatible store (fsspec).

`COHORT_ARTIFACT_URL` names the store: a plain path or `file://` URL (the default is
`<DATA_DIR>/artifacts`, enough for one machine), or `s3://bucket/prefix` for many
machines (s3fs; `COHORT_ARTIFACT_ENDPOINT_URL` for MinIO and other S3-compatible
servers; credentials from the usual AWS_* variables). Keys are relative and checked
(services/storage/keys.py), so no key names a path outside the store's root.
"""

from __future__ import annotations

import builtins
import os
import stat
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from services.settings import Settings, get_settings
from services.storage.keys import check_key, check_prefix
from services.storage.owned_tree import OwnedTree
from services.storage.tree_sync import TreeSync, object_version

# Local writes go here first and are renamed into place, so a reader never sees half
# a file; list() hides it.
S3_PART_BYTES = 8 * 2**20  # multipart upload part size (see put_file)
S3_PARTS_IN_FLIGHT = 4
_PARTIAL = ".partial"


def open_store(url: str | None = None, *, settings: Settings | None = None) -> ArtifactStore:
    """The store at `url`, or the one the settings name (COHORT_ARTIFACT_URL)."""
    settings = settings or get_settings()
    url = url or settings.ARTIFACT_URL or str(settings.data_dir / "artifacts")
    options: dict[str, Any] = {}
    if url.startswith(("s3://", "s3a://")):
        # No listings cache: another process (an agent, the api) writes the same
        # prefixes, and a stale listing would hide its files. A private instance: s3fs
        # instances are cached per process and are not safe to share across a fork.
        options = {"use_listings_cache": False, "skip_instance_cache": True}
        if settings.ARTIFACT_ENDPOINT_URL:
            options["endpoint_url"] = settings.ARTIFACT_ENDPOINT_URL
    else:
        options = {"auto_mkdir": True}
    fs, root = fsspec.core.url_to_fs(url, **options)
    return ArtifactStore(fs, root.rstrip("/"), url=url)


def store_uri(key: str, *, settings: Settings | None = None) -> str:
    """Where `key` is in the store the settings name, as a URI another tool can open:
    `s3://bucket/prefix/<key>`, or `file:///<absolute root>/<key>` for a directory."""
    settings = settings or get_settings()
    url = settings.ARTIFACT_URL or str(settings.data_dir / "artifacts")
    root = url.rstrip("/") if "://" in url else Path(url).expanduser().resolve().as_uri()
    return f"{root}/{check_key(key)}"


class ArtifactStore:
    """Bytes under relative keys, in a directory or an S3 bucket prefix."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str, *, url: str) -> None:
        self.fs = fs
        self.root = root
        self.url = url
        self.is_local = isinstance(fs, LocalFileSystem)
        self._trees = TreeSync(self)
        if self.is_local:
            fs.makedirs(root, exist_ok=True)

    def __repr__(self) -> str:
        return f"ArtifactStore({self.url!r})"

    # -- paths -----------------------------------------------------------------------------

    def _path(self, key: str) -> str:
        check_key(key)
        if key.split("/", 1)[0] == _PARTIAL:
            raise ValueError(f"key {key!r} is reserved")
        return f"{self.root}/{key}"

    def _dir(self, prefix: str) -> str:
        prefix = check_prefix(prefix)
        return f"{self.root}/{prefix}" if prefix else self.root

    # -- single objects --------------------------------------------------------------------

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Copy a local file to `key` (readers see the old object or the whole new one)."""
        target = self._path(key)
        if self.is_local:
            self._local_replace(target, lambda tmp: self.fs.put_file(os.fspath(path), tmp))
        else:
            # s3fs sends a file under twice its default part (2 x 50 MiB) as one PUT read
            # whole into memory, and larger ones 10 parts at a time: a 100 MB bundle cost the
            # api ~200 MiB. S3_PART_BYTES parts (S3's minimum is 5 MiB), S3_PARTS_IN_FLIGHT
            # at once, bound what one upload holds, whatever its size.
            self.fs.put_file(
                os.fspath(path), target, chunksize=S3_PART_BYTES, max_concurrency=S3_PARTS_IN_FLIGHT
            )

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write `data` to `key`."""
        target = self._path(key)
        if self.is_local:
            self._local_replace(target, lambda tmp: self.fs.pipe_file(tmp, data))
        else:
            self.fs.pipe_file(target, data)

    def _local_replace(self, target: str, write: Any) -> None:
        partial = f"{self.root}/{_PARTIAL}"
        os.makedirs(partial, exist_ok=True)
        tmp = f"{partial}/{uuid.uuid4().hex}"
        try:
            write(tmp)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(tmp, target)  # atomic within one filesystem
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def get_file(self, key: str, dest_path: str | os.PathLike[str]) -> None:
        """Copy `key` to a local file (written aside, then renamed into place).

        Raises:
            FileNotFoundError: no object at `key`.
        """
        source = self._path(key)
        dest = Path(dest_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".partial")
        os.close(fd)
        try:
            self.fs.get_file(source, tmp)
            os.replace(tmp, dest)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def open_read(self, key: str) -> IO[bytes]:
        """A binary file object reading `key` as a stream (S3: ranged reads, block by block).

        Raises:
            FileNotFoundError: no object at `key`.
        """
        stream: IO[bytes] = self.fs.open(self._path(key), "rb")  # fsspec has no types
        return stream

    def open_sized(self, key: str) -> tuple[IO[bytes], int]:
        """The object at `key` opened, and its size: the size of the version opened, which
        a writer replacing the object meanwhile does not change (a local file: its open
        descriptor's; S3: the object as it was when opened).

        Raises:
            FileNotFoundError: no object at `key` (a directory is none).
        """
        path = self._path(key)
        if self.is_local:
            try:
                handle: IO[bytes] = open(path, "rb")  # noqa: SIM115 - the caller closes it
            except (IsADirectoryError, NotADirectoryError):
                raise FileNotFoundError(key) from None
            opened = os.fstat(handle.fileno())
            if not stat.S_ISREG(opened.st_mode):
                handle.close()
                raise FileNotFoundError(key)
            return handle, opened.st_size
        handle = self.fs.open(path, "rb")
        return handle, int(getattr(handle, "size", None) or self.size(key))

    def exists(self, key: str) -> bool:
        """Whether an object (not a directory) is stored at `key`."""
        return bool(self.fs.isfile(self._path(key)))

    def size(self, key: str) -> int:
        """The size of the object at `key` in bytes.

        Raises:
            FileNotFoundError: no object at `key`.
        """
        info = self.fs.info(self._path(key))
        if info.get("type") != "file":
            raise FileNotFoundError(key)
        return int(info["size"])

    def version(self, key: str) -> tuple[int, str] | None:
        """(size, version) of the object at `key` (the version as list_versions gives it),
        or None when there is none."""
        try:
            info = self.fs.info(self._path(key))
        except FileNotFoundError:
            return None
        if info.get("type") != "file":
            return None
        return int(info["size"]), object_version(info)

    def delete(self, key: str, *, missing_ok: bool = False) -> None:
        """Delete the object at `key`.

        Raises:
            FileNotFoundError: no object at `key` (unless `missing_ok`).
        """
        if not self.exists(key):
            if missing_ok:
                return
            raise FileNotFoundError(key)
        path = self._path(key)
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            if not missing_ok:  # removed in between by another writer
                raise
            return
        if self.is_local:
            # Empty directories left behind would stop a file taking their name later
            # (S3 has no directories).
            parent = os.path.dirname(path)
            while parent != self.root and parent.startswith(self.root + "/"):
                try:
                    os.rmdir(parent)
                except OSError:
                    break  # not empty
                parent = os.path.dirname(parent)

    # -- prefixes --------------------------------------------------------------------------

    def infos(self, prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """(key relative to `prefix`, info) of every object under `prefix`."""
        base = self._dir(prefix)
        if not self.fs.isdir(base):
            return
        for path, info in self.fs.find(base, detail=True, withdirs=False).items():
            if not path.startswith(base + "/"):
                continue  # both backends answer with paths under the one they were asked
            rel = path[len(base) + 1 :]
            if not prefix and rel.split("/", 1)[0] == _PARTIAL:
                continue
            if info.get("type") == "file":
                yield rel, info

    def list(self, prefix: str = "") -> builtins.list[tuple[str, int]]:
        """(key, size) of every object under the directory-like `prefix`, sorted by key."""
        head = check_prefix(prefix)
        return sorted(
            (f"{head}/{rel}" if head else rel, int(info["size"])) for rel, info in self.infos(head)
        )

    def list_versions(self, prefix: str = "") -> builtins.list[tuple[str, int, str]]:
        """(key, size, version) of every object under `prefix`, sorted by key. The version
        changes whenever the bytes do: S3's ETag; a local file's inode and mtime (every
        write here is a rename of a new file)."""
        head = check_prefix(prefix)
        return sorted(
            (f"{head}/{rel}" if head else rel, int(info["size"]), object_version(info))
            for rel, info in self.infos(head)
        )

    def delete_prefix(self, prefix: str) -> None:
        """Delete every object under `prefix` (a non-empty prefix: never the whole store)."""
        base = self._dir(prefix)
        if not check_prefix(prefix):
            raise ValueError("delete_prefix needs a non-empty prefix")
        if self.fs.exists(base):
            self.fs.rm(base, recursive=True)

    # -- trees (services/storage/tree_sync.py) ---------------------------------------------

    def put_tree(
        self,
        prefix: str,
        local_dir: str | os.PathLike[str],
        *,
        mirror: bool = False,
        select: Callable[[str], bool] | None = None,
    ) -> builtins.list[str]:
        """Upload what changed under `local_dir` to `prefix` (TreeSync.put_tree)."""
        return self._trees.put_tree(prefix, local_dir, mirror=mirror, select=select)

    def put_whole(self, prefix: str, tree: OwnedTree, rels: builtins.list[str]) -> bool:
        """Send files `rels` of `tree` under `prefix`, all or none (TreeSync.put_whole)."""
        return self._trees.put_whole(prefix, tree, rels)

    def get_tree(
        self,
        prefix: str,
        local_dir: str | os.PathLike[str],
        *,
        mirror: bool = False,
        select: Callable[[str], bool] | None = None,
    ) -> builtins.list[str]:
        """Download what changed under `prefix` to `local_dir` (TreeSync.get_tree)."""
        return self._trees.get_tree(prefix, local_dir, mirror=mirror, select=select)
