"""ArtifactStore: one interface over a local directory and any S3-compatible store (fsspec).

`COHORT_ARTIFACT_URL` names the store: a plain path or `file://` URL (the default is
`<DATA_DIR>/artifacts`, enough for one machine), or `s3://bucket/prefix` for many
machines (s3fs; `COHORT_ARTIFACT_ENDPOINT_URL` for MinIO and other S3-compatible
servers; credentials from the usual AWS_* variables). Keys are relative and checked
(services/storage/keys.py), so no key names a path outside the store's root.
"""

from __future__ import annotations

import builtins
import datetime as dt
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from services.settings import Settings, get_settings
from services.storage.keys import check_key, check_prefix

# Local writes go here first and are renamed into place, so a reader never sees half
# a file; list() hides it.
_PARTIAL = ".partial"

_T = TypeVar("_T")


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


def _mtime(info: dict[str, Any]) -> float:
    """Seconds since the epoch a file was last written, from either backend's info."""
    if "mtime" in info:
        return float(info["mtime"])
    last = info.get("LastModified") or info.get("last_modified")
    if isinstance(last, dt.datetime):
        return last.timestamp()
    return 0.0


def _version(info: dict[str, Any]) -> str:
    etag = info.get("ETag") or info.get("etag")
    if etag:
        return str(etag).strip('"')
    return f"{info.get('ino', '')}:{info.get('mtime', '')}"


class ArtifactStore:
    """Bytes under relative keys, in a directory or an S3 bucket prefix."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str, *, url: str) -> None:
        self.fs = fs
        self.root = root
        self.url = url
        self.is_local = isinstance(fs, LocalFileSystem)
        # put_tree/get_tree: (local file, key) -> (size, mtime_ns) of the local file when
        # this store last sent or fetched it. S3 keeps whole seconds, too coarse to tell a
        # file rewritten in the second it was uploaded from the uploaded one.
        self._synced: dict[tuple[str, str], tuple[int, int]] = {}
        # get_tree: (local file, key) -> (stored version, local mtime_ns) when last fetched.
        self._fetched: dict[tuple[str, str], tuple[str, int]] = {}
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
            self.fs.put_file(os.fspath(path), target)

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
        return self.fs.open(self._path(key), "rb")

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

    def _infos(self, prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """(key relative to `prefix`, info) of every object under `prefix`."""
        base = self._dir(prefix)
        if not self.fs.isdir(base):
            return
        for path, info in self.fs.find(base, detail=True, withdirs=False).items():
            if not path.startswith(base + "/"):
                continue  # both backends answer with paths under the one they were asked
            rel = path[len(base) + 1:]
            if not prefix and rel.split("/", 1)[0] == _PARTIAL:
                continue
            if info.get("type") == "file":
                yield rel, info

    def list(self, prefix: str = "") -> builtins.list[tuple[str, int]]:
        """(key, size) of every object under the directory-like `prefix`, sorted by key."""
        head = check_prefix(prefix)
        return sorted((f"{head}/{rel}" if head else rel, int(info["size"]))
                      for rel, info in self._infos(head))

    def list_versions(self, prefix: str = "") -> builtins.list[tuple[str, int, str]]:
        """(key, size, version) of every object under `prefix`, sorted by key. The version
        changes whenever the bytes do: S3's ETag; a local file's inode and mtime (every
        write here is a rename of a new file)."""
        head = check_prefix(prefix)
        return sorted((f"{head}/{rel}" if head else rel, int(info["size"]), _version(info))
                      for rel, info in self._infos(head))

    def delete_prefix(self, prefix: str) -> None:
        """Delete every object under `prefix` (a non-empty prefix: never the whole store)."""
        base = self._dir(prefix)
        if not check_prefix(prefix):
            raise ValueError("delete_prefix needs a non-empty prefix")
        if self.fs.exists(base):
            self.fs.rm(base, recursive=True)

    def put_tree(self, prefix: str, local_dir: str | os.PathLike[str], *,
                 mirror: bool = False, select: Callable[[str], bool] | None = None
                 ) -> builtins.list[str]:
        """Upload the regular files under `local_dir` that are new or changed; with `mirror`,
        delete stored files gone locally. Changed: another size than the stored copy, or
        written since this store last sent or fetched it (or, the first time, later than the
        stored copy was). With `select`, only the relative paths it accepts are looked at,
        here and in the store.

        Returns the keys (relative to `prefix`) uploaded.
        """
        head = check_prefix(prefix)
        stored = _selected(dict(self._infos(head)), select)
        uploaded = []
        local = _selected(_local_files(Path(local_dir)), select)
        for rel, stat in local.items():
            key = f"{head}/{rel}" if head else rel
            path = Path(local_dir) / rel
            info = stored.get(rel)
            synced = self._synced.get((str(path), key))
            if info is None or int(info["size"]) != stat.st_size or (
                    synced != (stat.st_size, stat.st_mtime_ns) if synced
                    else stat.st_mtime > _mtime(info)):
                try:
                    self.put_file(key, path)
                except FileNotFoundError:
                    continue  # removed since listed (a checkpoint rotated out): not sent
                self._synced[(str(path), key)] = (stat.st_size, stat.st_mtime_ns)
                uploaded.append(rel)
        if mirror:
            for rel in stored.keys() - local.keys():
                self.fs.rm_file(self._path(f"{head}/{rel}" if head else rel))
        return uploaded

    def get_tree(self, prefix: str, local_dir: str | os.PathLike[str], *,
                 mirror: bool = False, select: Callable[[str], bool] | None = None
                 ) -> builtins.list[str]:
        """Download the objects under `prefix` that are missing or changed locally; with
        `mirror`, delete local files that are not stored. Changed: another size, another
        version than this store last fetched to that file (or, the first time, stored later
        than the local copy was written). A downloaded file takes the stored mtime. With
        `select`, only the relative paths it accepts are looked at, here and in the store.

        Returns the paths (relative to `local_dir`) downloaded.
        """
        head = check_prefix(prefix)
        root = Path(local_dir)
        root.mkdir(parents=True, exist_ok=True)
        local = _selected(_local_files(root), select)
        downloaded = []
        stored = _selected(dict(self._infos(head)), select)
        for rel, info in stored.items():
            check_key(rel)  # a stored name never places a file outside local_dir
            key = f"{head}/{rel}" if head else rel
            path, stat, mtime = root / rel, local.get(rel), _mtime(info)
            fetched = self._fetched.get((str(path), key))
            if stat is None or stat.st_size != int(info["size"]) or (
                    fetched != (_version(info), stat.st_mtime_ns) if fetched
                    else mtime > stat.st_mtime):
                self.get_file(key, path)
                os.utime(path, (mtime, mtime))
                mtime_ns = path.stat().st_mtime_ns
                self._fetched[(str(path), key)] = (_version(info), mtime_ns)
                # Sending it back unchanged is no change either.
                self._synced[(str(path), key)] = (int(info["size"]), mtime_ns)
                downloaded.append(rel)
        if mirror:
            for rel in local.keys() - stored.keys():
                (root / rel).unlink()
        return downloaded


def _selected(entries: dict[str, _T], select: Callable[[str], bool] | None) -> dict[str, _T]:
    return entries if select is None else {k: v for k, v in entries.items() if select(k)}


def _local_files(root: Path) -> dict[str, os.stat_result]:
    """Regular files under `root` by '/'-joined relative path (symlinks are not followed)."""
    found: dict[str, os.stat_result] = {}
    if not root.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file() or name.endswith(".partial"):
                continue
            found[path.relative_to(root).as_posix()] = path.stat()
    return found
