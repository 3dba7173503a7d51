"""Sync a local directory tree with a prefix of the artifact store, sending only changes.

What changed is decided per file from its size and from what this process last sent or
fetched (`TreeSync` remembers it), so a checkpoint or TensorBoard directory synced every
few seconds moves only its new files. One `TreeSync` per `ArtifactStore`: use it through
`ArtifactStore.put_tree` and `ArtifactStore.get_tree`.

The trees are a replica's (its checkpoints, model, TensorBoard files), written by a user
the agent must not trust: they are listed and read through an `OwnedTree`
(services/storage/owned_tree.py), which follows no link and reads only regular files of
the tree's owner, each through the descriptor it checked. Pass one as `local_dir` to say
whose files those are and where refusals go; a plain path reads as the root's owner.
A download is written aside and renamed into place through the same descriptors.
"""

from __future__ import annotations

import builtins
import datetime as dt
import os
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from services.storage.keys import check_key, check_prefix
from services.storage.owned_tree import OwnedTree, descriptor_path

if TYPE_CHECKING:
    from services.storage.store import ArtifactStore

_T = TypeVar("_T")
COPY_BYTES = 1 << 20  # per read of a download: what one holds in memory


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

    def put_tree(
        self,
        prefix: str,
        local_dir: str | os.PathLike[str],
        *,
        mirror: bool = False,
        select: Callable[[str], bool] | None = None,
    ) -> builtins.list[str]:
        """Upload the regular files under `local_dir` that are new or changed; with `mirror`,
        delete stored files gone locally. Changed: another size than the stored copy, or
        written since this store last sent or fetched it (or, the first time, later than the
        stored copy was). With `select`, only the relative paths it accepts are looked at,
        here and in the store. A link, a non-regular file or another user's file is never
        read (and stays in the store with `mirror`, if there).

        Returns the keys (relative to `prefix`) uploaded.
        """
        head = check_prefix(prefix)
        tree = as_tree(local_dir)
        stored = _selected(dict(self.store.infos(head)), select)
        uploaded = []
        local = _selected(_local_files(tree), select)
        for rel, stat in local.items():
            key = f"{head}/{rel}" if head else rel
            path = tree.root / rel
            info = stored.get(rel)
            synced = self._synced.get((str(path), key))
            if (
                info is None
                or int(info["size"]) != stat.st_size
                or (
                    synced != (stat.st_size, stat.st_mtime_ns)
                    if synced
                    else stat.st_mtime > _mtime(info)
                )
            ):
                if self._put_opened(tree, rel, key) is not None:
                    uploaded.append(rel)
        if mirror:
            for rel in stored.keys() - local.keys():
                self.store.delete(f"{head}/{rel}" if head else rel, missing_ok=True)
        return uploaded

    def put_whole(self, prefix: str, tree: OwnedTree, rels: builtins.list[str]) -> bool:
        """Send the files `rels` of `tree` as one set: every one is opened before any is
        sent, so a writer that deletes them meanwhile (a checkpoint rotated out) cannot
        leave half the set stored; an open descriptor keeps a file's bytes. Returns
        whether they were sent (False: one was gone or refused when opened, none sent)."""
        head = check_prefix(prefix)
        opened: dict[str, int] = {}
        try:
            for rel in rels:
                opened[rel] = tree.open(rel)
        except OSError:
            for fd in opened.values():
                os.close(fd)
            return False
        for rel, fd in opened.items():
            self._put_opened(tree, rel, f"{head}/{rel}" if head else rel, fd)
        return True

    def _put_opened(
        self, tree: OwnedTree, rel: str, key: str, fd: int | None = None
    ) -> tuple[int, int] | None:
        """Send `rel` from the descriptor `tree` opens and checks (or `fd`, opened so
        already, and closed here), never from its path (the replica may have renamed a
        link over it since the listing), and note it as sent: its (size, mtime_ns) as
        sent, or None if it is gone or refused."""
        if fd is None:
            try:
                fd = tree.open(rel)
            except OSError:
                return None  # removed since listed (a checkpoint rotated out), or refused
        try:
            opened = os.fstat(fd)
            self.store.put_file(key, descriptor_path(fd))
        finally:
            os.close(fd)
        sent = opened.st_size, opened.st_mtime_ns
        self._synced[(str(tree.root / rel), key)] = sent
        return sent

    def get_tree(
        self,
        prefix: str,
        local_dir: str | os.PathLike[str],
        *,
        mirror: bool = False,
        select: Callable[[str], bool] | None = None,
    ) -> builtins.list[str]:
        """Download the objects under `prefix` that are missing or changed locally; with
        `mirror`, delete local files that are not stored. Changed: another size, another
        version than this store last fetched to that file (or, the first time, stored later
        than the local copy was written). A downloaded file takes the stored mtime. With
        `select`, only the relative paths it accepts are looked at, here and in the store.

        Returns the paths (relative to `local_dir`) downloaded.
        """
        head = check_prefix(prefix)
        tree = as_tree(local_dir)
        tree.root.mkdir(parents=True, exist_ok=True)
        local = _selected(_local_files(tree), select)
        downloaded = []
        stored = _selected(dict(self.store.infos(head)), select)
        for rel, info in stored.items():
            check_key(rel)  # a stored name never places a file outside local_dir
            key = f"{head}/{rel}" if head else rel
            path, stat, mtime = tree.root / rel, local.get(rel), _mtime(info)
            fetched = self._fetched.get((str(path), key))
            if (
                stat is None
                or stat.st_size != int(info["size"])
                or (
                    fetched != (object_version(info), stat.st_mtime_ns)
                    if fetched
                    else mtime > stat.st_mtime
                )
            ):
                mtime_ns = tree.replace(rel, self._copier(key), mtime).st_mtime_ns
                self._fetched[(str(path), key)] = (object_version(info), mtime_ns)
                # Sending it back unchanged is no change either.
                self._synced[(str(path), key)] = (int(info["size"]), mtime_ns)
                downloaded.append(rel)
        if mirror:
            for rel in local.keys() - stored.keys():
                tree.unlink(rel)
        return downloaded

    def _copier(self, key: str) -> Callable[[BinaryIO], object]:
        """What writes the object at `key` into a file (FileNotFoundError: none there)."""

        def copy(out: BinaryIO) -> None:
            with self.store.open_read(key) as source:
                shutil.copyfileobj(source, out, COPY_BYTES)

        return copy


def _selected(entries: dict[str, _T], select: Callable[[str], bool] | None) -> dict[str, _T]:
    return entries if select is None else {k: v for k, v in entries.items() if select(k)}


def as_tree(local_dir: str | os.PathLike[str]) -> OwnedTree:
    """`local_dir` as the tree it is, or a tree of its root's owner."""
    return local_dir if isinstance(local_dir, OwnedTree) else OwnedTree(local_dir)


def _local_files(tree: OwnedTree) -> dict[str, os.stat_result]:
    """The tree's regular files by '/'-joined relative path, but a `.partial` one (a
    write of get_tree's, or of the replica's, in progress)."""
    return {rel: info for rel, info in tree.files().items() if not rel.endswith(".partial")}
