"""Sync a local directory tree with a prefix of the artifact store, sending only changes.

What changed is decided per file from its size and from what this process last sent or
fetched (`TreeSync` remembers it), so a checkpoint or TensorBoard directory synced every
few seconds moves only its new files. One `TreeSync` per `ArtifactStore`: use it through
`ArtifactStore.put_tree` and `ArtifactStore.get_tree`.
"""

from __future__ import annotations

import builtins
import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from services.storage.keys import check_key, check_prefix

if TYPE_CHECKING:
    from services.storage.store import ArtifactStore

_T = TypeVar("_T")


def _mtime(info: dict[str, Any]) -> float:
    """Seconds since the epoch a file was last written, from either backend's info."""
    if "mtime" in info:
        return float(info["mtime"])
    last = info.get("LastModified") or info.get("last_modified")
    if isinstance(last, dt.datetime):
        return last.timestamp()
    return 0.0


def object_version(info: dict[str, Any]) -> str:
    """What changes whenever a stored object's bytes do: S3's ETag, a local inode and mtime."""
    etag = info.get("ETag") or info.get("etag")
    if etag:
        return str(etag).strip('"')
    return f"{info.get('ino', '')}:{info.get('mtime', '')}"


class TreeSync:
    """put_tree / get_tree for one store, with what it last sent and fetched per file."""

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store
        # (local file, key) -> (size, mtime_ns) of the local file when this store last
        # sent or fetched it. S3 keeps whole seconds, too coarse to tell a file rewritten
        # in the second it was uploaded from the uploaded one.
        self._synced: dict[tuple[str, str], tuple[int, int]] = {}
        # get_tree: (local file, key) -> (stored version, local mtime_ns) when last fetched.
        self._fetched: dict[tuple[str, str], tuple[str, int]] = {}

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
        stored = _selected(dict(self.store.infos(head)), select)
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
                    self.store.put_file(key, path)
                except FileNotFoundError:
                    continue  # removed since listed (a checkpoint rotated out): not sent
                self._synced[(str(path), key)] = (stat.st_size, stat.st_mtime_ns)
                uploaded.append(rel)
        if mirror:
            for rel in stored.keys() - local.keys():
                self.store.delete(f"{head}/{rel}" if head else rel, missing_ok=True)
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
        stored = _selected(dict(self.store.infos(head)), select)
        for rel, info in stored.items():
            check_key(rel)  # a stored name never places a file outside local_dir
            key = f"{head}/{rel}" if head else rel
            path, stat, mtime = root / rel, local.get(rel), _mtime(info)
            fetched = self._fetched.get((str(path), key))
            if stat is None or stat.st_size != int(info["size"]) or (
                    fetched != (object_version(info), stat.st_mtime_ns) if fetched
                    else mtime > stat.st_mtime):
                self.store.get_file(key, path)
                os.utime(path, (mtime, mtime))
                mtime_ns = path.stat().st_mtime_ns
                self._fetched[(str(path), key)] = (object_version(info), mtime_ns)
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
