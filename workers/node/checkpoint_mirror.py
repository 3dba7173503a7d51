"""A job's checkpoints between this node and the artifact store shared by every node.

While the replica that owns the job's real checkpoint runs (replica 0: under
MultiWorkerMirroredStrategy tf-keras' BackupAndRestore writes the chief's checkpoint to
`<backup_dir>/chief/` and every other worker to a scratch `workertemp_<task>/` it
deletes again), the agent mirrors the job's checkpoint directory to
`jobs/<id>/checkpoints/` as it changes. Before a replica of a new attempt starts on a
node, the agent restores the newest checkpoint from there when the local one is
missing or older, so a gang restarted on other nodes (another DATA_DIR) resumes.

A store reader must never see a checkpoint that is half there. TensorFlow writes a
checkpoint's data and `.index` files first and its state file `checkpoint` (which
names the newest one) last; so does the mirror: a state file is sent only once every
file of the checkpoint it names is stored, data a state file still names is never
deleted, and a restore writes the state file locally after the data it names.

The replica owns the checkpoint directory and may rename a link into it at any moment:
the mirror lists and reads it only through an `OwnedTree` (services/storage/owned_tree.py),
so what it sends is a regular file of the job's uid, read through the descriptor it checked;
anything else is reported to the syncer's `on_skip` and never sent. A restore writes and
deletes through it too: a directory swapped for a link is never written through.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from services.storage import keys
from services.storage.owned_tree import OnSkip, OwnedTree
from services.storage.store import ArtifactStore
from workers.node.checkpoint_names import (
    checkpoint_files,
    differs,
    is_data,
    is_scratch,
    is_state,
    named_checkpoints,
    newer,
)

log = logging.getLogger("cohort.artifacts")


def _local_files(tree: OwnedTree) -> set[str]:
    return {rel for rel in tree.files() if not is_scratch(rel)}


def _writing(data: bytes) -> Callable[[BinaryIO], object]:
    return lambda out: out.write(data)


def _identity(tree: OwnedTree, rel: str) -> tuple[int, int, int]:
    stat = tree.lstat(rel)
    return (0, 0, 0) if stat is None else (stat.st_ino, stat.st_size, stat.st_mtime_ns)


class CheckpointMirror:
    """One job's checkpoint directory on this node and `jobs/<id>/checkpoints/`."""

    def __init__(
        self, store: ArtifactStore, job_id: int, local_dir: Path, *, owner: int | None = None
    ) -> None:
        """`owner`: the uid whose files are sent (None: the directory's owner)."""
        self.store = store
        self.prefix = keys.checkpoints_prefix(job_id)
        self.local_dir = Path(local_dir)
        self.owner = owner
        self._lock = threading.Lock()  # a restore and a sync never interleave
        self._stored: set[str] | None = None  # relative paths stored (None: not listed yet)
        self._sent_states: dict[str, bytes] = {}  # state files as stored, by relative path
        self._seen: set[str] = set()  # here at some point: may be deleted from the store

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}"

    def tree(self, on_skip: OnSkip | None = None) -> OwnedTree:
        """The local directory as read: no link followed, only the owner's regular files."""
        return OwnedTree(self.local_dir, owner=self.owner, on_skip=on_skip)

    def _list(self) -> set[str]:
        head = self.prefix + "/"
        return {key[len(head) :] for key, _ in self.store.list(self.prefix)}

    def restore(self, *, attempts: int = 3, store_wins: bool = False) -> list[str]:
        """Make the local directory hold the store's checkpoint if the local one is
        missing or older, or with `store_wins` whenever it differs (the replicas of a gang
        on several nodes must all resume from the same one, and only the store's is seen
        by all); returns the relative paths written here.

        Raises:
            FileNotFoundError: files kept vanishing while fetched (a writer still
                rotating checkpoints), `attempts` times; the local state file is then
                the one it was, naming files that are here.
        """
        for attempt in range(1, attempts + 1):
            try:
                return self._restore(store_wins)
            except FileNotFoundError:
                if attempt == attempts:
                    raise
                time.sleep(0.2 * attempt)
        return []

    def _restore(self, store_wins: bool) -> list[str]:
        with self._lock:
            stored = self._list()
            states = {rel: self._get_bytes(rel) for rel in stored if is_state(rel)}
            # Only what was here may be deleted from the store: a replica that starts
            # without the stored checkpoint must not delete it before it saves its own.
            self._stored, self._sent_states, self._seen = stored, dict(states), set()
            if not stored:
                return []
            is_newer = differs if store_wins else newer
            tree = self.tree()
            if states and not any(
                is_newer(data, tree.read_bytes(rel)) for rel, data in states.items()
            ):
                return []
            before = self._named_here()
            try:
                written = self.store.get_tree(self.prefix, tree, select=is_data)
                for rel, data in states.items():  # the state file last: it names the data
                    tree.replace(rel, _writing(data))
                    written.append(rel)
            except BaseException:
                self._forget_mixed(before)
                raise
            # Only now: after a restore cut off half way (a full disk), the store's state
            # files are not here, and a sync must not take them for deleted.
            self._seen = set(stored)
            if states:  # checkpoints of an older attempt here would never be rotated out
                for rel in _local_files(tree) - stored:
                    tree.unlink(rel)
            return written

    def _named_here(self) -> dict[str, dict[str, tuple[int, int, int]]]:
        """Each local state file's checkpoint files, with what identifies their bytes
        (inode, size, mtime: every file a restore writes is renamed into place)."""
        tree = self.tree()
        local = _local_files(tree)
        named: dict[str, dict[str, tuple[int, int, int]]] = {}
        for state_rel in (rel for rel in local if is_state(rel)):
            data = tree.read_bytes(state_rel)
            directory = state_rel.rpartition("/")[0]
            heads = [
                f"{directory}/{name}." if directory else f"{name}."
                for name in named_checkpoints(data or b"")
            ]
            named[state_rel] = {
                rel: _identity(tree, rel)
                for rel in local
                if any(rel.startswith(head) for head in heads)
            }
        return named

    def _forget_mixed(self, before: dict[str, dict[str, tuple[int, int, int]]]) -> None:
        """After a restore that failed half way: remove each local checkpoint (its state
        file first, then its files) some of whose files the restore replaced. Its index
        and data may now come from two different saves: TensorFlow must not restore it,
        and the mirror must not send its files back over the store's."""
        tree = self.tree()
        for state_rel, files in before.items():
            if all(_identity(tree, rel) == seen for rel, seen in files.items()):
                continue
            log.error(
                "a restore of %s was cut off after replacing files of the checkpoint "
                "%s names: removed it; this attempt starts without it",
                self.prefix,
                state_rel,
            )
            tree.unlink(state_rel)
            for rel in files:
                tree.unlink(rel)

    def _get_bytes(self, rel: str) -> bytes:
        with self.store.open_read(self._key(rel)) as handle:
            return handle.read()

    def sync(self, on_skip: OnSkip | None = None) -> list[str]:
        """Send what changed here; returns the relative paths sent. `on_skip` hears of
        each path not sent because it is a link, not a regular file, or not the owner's."""
        with self._lock:
            if self._stored is None:
                self._stored = self._list()
            tree = self.tree(on_skip)
            states = {
                rel: data
                for rel in _local_files(tree)
                if is_state(rel)
                if (data := tree.read_bytes(rel)) is not None
            }
            sent = self.store.put_tree(self.prefix, tree, select=is_data)
            local = _local_files(self.tree())  # after the upload: what it may have sent
            self._stored |= set(sent)
            self._seen |= local
            for rel, data in states.items():
                if self._sent_states.get(rel) == data:
                    continue
                if not self._complete(rel, data):
                    fresh, named = self._send_named(tree, rel)
                    sent += named
                    self._seen |= set(named)  # pruned from the store once rotated out here
                    data = fresh if fresh is not None else data
                if self._sent_states.get(rel) != data and self._complete(rel, data):
                    self.store.put_bytes(self._key(rel), data)
                    self._stored.add(rel)
                    self._sent_states[rel] = data
                    sent.append(rel)
            self._prune(local)
            return sent

    def _send_named(self, tree: OwnedTree, state_rel: str) -> tuple[bytes | None, list[str]]:
        """Read the state file `state_rel` again and send the files of the checkpoint it
        names (its newest) from descriptors opened at once, before any is sent; returns
        the state as read and the files sent.

        The listing `put_tree` sends from is older than the state file by a whole upload:
        a trainer that saves more often than a sync takes (BackupAndRestore keeps one
        checkpoint; a busy agent walks the tree slower than 25 steps take) has rotated the
        named files out by the time they are listed, sync after sync, and no state file
        would ever be complete. Here the state's read, one directory's listing and the
        openings follow each other within milliseconds, and an open descriptor keeps a
        file's bytes after the trainer deletes it, so the checkpoint goes whole."""
        data = tree.read_bytes(state_rel)
        names = named_checkpoints(data or b"")
        if not names:
            return data, []
        directory = state_rel.rpartition("/")[0]
        head = f"{directory}/" if directory else ""
        listed = {head + name for name in tree.names(directory)}
        files = checkpoint_files(directory, names[0], listed)
        if files is None:
            return data, []
        if not self.store.put_whole(self.prefix, tree, files):
            return data, []  # one was rotated out since the listing, or refused: next sync
        assert self._stored is not None
        self._stored.update(files)
        return data, files

    def _complete(self, state_rel: str, data: bytes) -> bool:
        names = named_checkpoints(data)
        directory = state_rel.rpartition("/")[0]
        assert self._stored is not None
        return bool(names) and checkpoint_files(directory, names[0], self._stored) is not None

    def _prune(self, local: set[str]) -> None:
        """Delete from the store what was here and is gone: state files first, then the
        data no stored state file names any more."""
        assert self._stored is not None
        gone = (self._seen & self._stored) - local
        for rel in sorted(r for r in gone if is_state(r)):
            self.store.delete(self._key(rel), missing_ok=True)
            self._stored.discard(rel)
            self._sent_states.pop(rel, None)
        named = set()
        for state_rel, data in self._sent_states.items():
            directory = state_rel.rpartition("/")[0]
            for name in named_checkpoints(data):
                named.add(f"{directory}/{name}" if directory else name)
        for rel in sorted(r for r in gone if is_data(r)):
            if not any(rel.startswith(f"{name}.") for name in named):
                self.store.delete(self._key(rel), missing_ok=True)
                self._stored.discard(rel)
