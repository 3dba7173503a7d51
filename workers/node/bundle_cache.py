"""A node's cache of code bundles: fetched once per digest, verified, unpacked once,
copied into each replica's own code directory.

    DATA_DIR/cache/bundles/<hex>.tar.gz    the archive, as stored (its mtime: last used)
    DATA_DIR/cache/bundles/<hex>/          the archive unpacked (checked unpack)
    DATA_DIR/cache/bundles/<hex>.lock      flock'd while the digest is fetched or copied

A lock per digest (flock: between threads of one agent and between agents sharing a
DATA_DIR) makes two replicas asking for one digest at once fetch it once. Each replica
gets a copy of the tree, never a hard link: a script may write into its code directory,
and one replica's writes must not reach another's tree. The cache is bounded
(COHORT_BUNDLE_CACHE_BYTES); the least recently used digests go first, never one in use.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from services.storage.bundles import Limits, sha256_file, unpack
from services.storage.keys import bundle_digest_hex, bundle_key
from services.storage.store import ArtifactStore

log = logging.getLogger("cohort.agent.bundles")


class BundleUnavailable(RuntimeError):
    """The bundle cannot be used: missing from the store, over a limit, or its bytes do
    not match its digest. The message is for a person."""


def _tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirnames, filenames in os.walk(path):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


class BundleCache:
    """Bundles by digest, fetched from `store` into `root`, at most `max_bytes` kept."""

    def __init__(self, root: Path, store: ArtifactStore, max_bytes: int,
                 limits: Limits) -> None:
        self.root = Path(root)
        self.store = store
        self.max_bytes = max_bytes
        self.limits = limits
        self.root.mkdir(parents=True, exist_ok=True)

    def checkout(self, digest: str, dest: Path) -> None:
        """Copy bundle `digest`'s files into the new directory `dest`.

        Raises:
            BundleUnavailable: not in the store, too big, or its bytes are not `digest`'s.
        """
        hex_digest = bundle_digest_hex(digest)
        with self._locked(hex_digest):
            tree = self._tree(hex_digest)
            if dest.exists():
                shutil.rmtree(dest)  # a start re-run after a crash: start clean
            shutil.copytree(tree, dest, symlinks=True)
            os.utime(self.root / f"{hex_digest}.tar.gz")  # most recently used
        self.evict()

    @contextmanager
    def _locked(self, hex_digest: str, blocking: bool = True) -> Iterator[bool]:
        with open(self.root / f"{hex_digest}.lock", "a+b") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _tree(self, hex_digest: str) -> Path:
        """The unpacked tree of a digest, fetched and unpacked if not cached (lock held)."""
        archive = self.root / f"{hex_digest}.tar.gz"
        tree = self.root / hex_digest
        if tree.is_dir() and archive.is_file():
            return tree
        if not archive.is_file():
            self._fetch(hex_digest, archive)
        staging = self.root / f".unpack-{hex_digest}-{uuid.uuid4().hex}"
        try:
            unpack(archive, staging, self.limits)
            shutil.rmtree(tree, ignore_errors=True)
            os.replace(staging, tree)  # a reader never sees half a tree
        except Exception:
            archive.unlink(missing_ok=True)  # fetch it again next time
            raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return tree

    def _fetch(self, hex_digest: str, archive: Path) -> None:
        key = bundle_key(hex_digest)
        try:
            size = self.store.size(key)
        except FileNotFoundError:
            raise BundleUnavailable(f"bundle sha256:{hex_digest} is not in the artifact "
                                    "store") from None
        if size > self.limits.max_bytes:
            raise BundleUnavailable(f"bundle sha256:{hex_digest} is {size} bytes, over the "
                                    f"limit of {self.limits.max_bytes}")
        partial = self.root / f".fetch-{hex_digest}-{uuid.uuid4().hex}"
        try:
            self.store.get_file(key, partial)
            actual = sha256_file(partial)
            if actual != f"sha256:{hex_digest}":
                raise BundleUnavailable(f"bundle sha256:{hex_digest} does not match its "
                                        f"digest (the stored bytes hash to {actual})")
            os.replace(partial, archive)
        finally:
            partial.unlink(missing_ok=True)
        log.info("fetched bundle sha256:%s (%d bytes)", hex_digest, size)

    def evict(self) -> None:
        """Remove the least recently used digests until the cache fits `max_bytes`;
        a digest another thread or agent holds locked is skipped."""
        entries = []
        for archive in self.root.glob("*.tar.gz"):
            hex_digest = archive.name.removesuffix(".tar.gz")
            tree = self.root / hex_digest
            try:
                used = archive.stat().st_mtime
                size = archive.stat().st_size + (_tree_bytes(tree) if tree.is_dir() else 0)
            except FileNotFoundError:
                continue
            entries.append((used, hex_digest, size))
        total = sum(size for _, _, size in entries)
        for _used, hex_digest, size in sorted(entries):
            if total <= self.max_bytes:
                return
            with self._locked(hex_digest, blocking=False) as held:
                if not held:
                    continue
                shutil.rmtree(self.root / hex_digest, ignore_errors=True)
                (self.root / f"{hex_digest}.tar.gz").unlink(missing_ok=True)
                total -= size
                log.info("evicted bundle sha256:%s from the cache", hex_digest)
