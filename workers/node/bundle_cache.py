"""A node's cache of code bundles: fetched once per digest and verified; unpacked into
each replica's own code directory by a child process running as the job's user.

    DATA_DIR/cache/bundles/<hex>.tar.gz    the archive, as stored (its mtime: last used)
    DATA_DIR/cache/bundles/<hex>.lock      flock'd while the digest is fetched

A lock per digest (flock: between threads of one agent and between agents sharing a
DATA_DIR) makes two replicas asking for one digest at once fetch it once. The cache keeps
archives only: the agent (root) no longer unpacks anything. Each replica's copy is
unpacked from the archive by `workers.node.code_unpack` as the job's uid, reading the
archive from the stdin the agent opens for it; a flaw in unpacking can then write only
what the job itself could. It costs an interpreter's start and a decompression per
replica where a tree was copied: 0.12 s against 0.01 s for a 200-file bundle (median of
5 rounds, 2026-11, on a 2-core machine). The cache is
bounded (COHORT_BUNDLE_CACHE_BYTES); the least recently used digests go first, never one
in use.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from services.storage.bundles import BundleRejected, Limits, sha256_file
from services.storage.keys import bundle_digest_hex, bundle_key
from services.storage.store import ArtifactStore
from workers.node import code_unpack
from workers.node.isolation import ReplicaUser, popen_options

log = logging.getLogger("cohort.agent.bundles")


class BundleUnavailable(RuntimeError):
    """The bundle cannot be used: missing from the store, over a limit, or its bytes do
    not match its digest. The message is for a person."""


# Unpacking 1 GB (the largest bundle the default limits allow) takes well under this.
UNPACK_TIMEOUT = 900.0


def unpack_as(
    archive: IO[bytes], dest: Path, limits: Limits, *, python: str, user: ReplicaUser | None
) -> int:
    """Unpack `archive` into the new directory `dest` in a child process running as
    `user` (None: as this agent's user); returns its file count.

    Raises:
        BundleRejected: the archive holds what no unpack admits (the child's message).
        OSError: ENOSPC, the node's disk is full.
        RuntimeError: the child failed otherwise (the message holds no path of the node).
    """
    try:
        done = subprocess.run(  # noqa: S603 - an argv, never a shell
            code_unpack.argv(python, dest, limits),
            stdin=archive,
            capture_output=True,
            cwd="/",
            env={"PATH": os.defpath},
            timeout=UNPACK_TIMEOUT,
            check=False,
            **popen_options(user),
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"unpacking the bundle took over {UNPACK_TIMEOUT:.0f} s") from None
    why = done.stderr.decode(errors="replace").strip()[-2000:]
    if done.returncode == code_unpack.REFUSED_EXIT:
        raise BundleRejected(why)
    if done.returncode == code_unpack.NO_SPACE_EXIT:
        raise OSError(errno.ENOSPC, "no space left on the node's disk to unpack the bundle")
    if done.returncode == code_unpack.FAILED_EXIT:
        raise RuntimeError(f"unpacking the bundle failed: {why}")
    if done.returncode != 0:
        log.warning("the unpack of a bundle exited with %d: %s", done.returncode, why)
        raise RuntimeError(f"unpacking the bundle failed (exit {done.returncode})")
    return int(done.stdout)


class BundleCache:
    """Bundles by digest, fetched from `store` into `root`, at most `max_bytes` kept."""

    def __init__(self, root: Path, store: ArtifactStore, max_bytes: int, limits: Limits) -> None:
        self.root = Path(root)
        self.store = store
        self.max_bytes = max_bytes
        self.limits = limits
        self.root.mkdir(parents=True, exist_ok=True)

    def checkout(
        self,
        digest: str,
        dest: Path,
        *,
        user: ReplicaUser | None = None,
        python: str = sys.executable,
    ) -> None:
        """Unpack bundle `digest` into the new directory `dest` as `user` (None: as this
        agent's user), with the interpreter `python`.

        Raises:
            BundleUnavailable: not in the store, too big, its bytes are not `digest`'s, or
                it holds what no unpack admits (the message names the member).
        """
        hex_digest = bundle_digest_hex(digest)
        with self._locked(hex_digest):
            archive = self.root / f"{hex_digest}.tar.gz"
            if not archive.is_file():
                self._fetch(hex_digest, archive)
            os.utime(archive)  # most recently used
            # Opened under the lock: an eviction meanwhile unlinks a name, not this file.
            handle = open(archive, "rb")  # noqa: SIM115 - closed below, outside the lock
        try:
            with handle:
                unpack_as(handle, dest, self.limits, python=python, user=user)
        except BundleRejected as exc:
            raise BundleUnavailable(
                f"bundle sha256:{hex_digest} cannot be unpacked: {exc}"
            ) from None
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

    def _fetch(self, hex_digest: str, archive: Path) -> None:
        key = bundle_key(hex_digest)
        try:
            size = self.store.size(key)
        except FileNotFoundError:
            raise BundleUnavailable(
                f"bundle sha256:{hex_digest} is not in the artifact store"
            ) from None
        if size > self.limits.max_bytes:
            raise BundleUnavailable(
                f"bundle sha256:{hex_digest} is {size} bytes, over the "
                f"limit of {self.limits.max_bytes}"
            )
        partial = self.root / f".fetch-{hex_digest}-{uuid.uuid4().hex}"
        try:
            self.store.get_file(key, partial)
            actual = sha256_file(partial)
            if actual != f"sha256:{hex_digest}":
                raise BundleUnavailable(
                    f"bundle sha256:{hex_digest} does not match its "
                    f"digest (the stored bytes hash to {actual})"
                )
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
            try:
                used = archive.stat().st_mtime
                size = archive.stat().st_size
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
                # An unpacked tree an earlier version of the agent kept beside it.
                shutil.rmtree(self.root / hex_digest, ignore_errors=True)
                (self.root / f"{hex_digest}.tar.gz").unlink(missing_ok=True)
                total -= size
                log.info("evicted bundle sha256:%s from the cache", hex_digest)
