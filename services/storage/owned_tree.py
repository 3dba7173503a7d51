"""Read a directory tree another user writes (a replica's checkpoints, saved model,
TensorBoard files, metrics file) without following any link it puts there.

The agent runs as root; the tree belongs to a job's replicas, which may rename a link
(or a fifo, or a hard link to some other user's file) into any name between the agent's
look and its read. So nothing here checks a path and then opens it: every directory on
the way is opened from its parent's descriptor with O_NOFOLLOW, the file too (and
O_NONBLOCK: a fifo must not hang the reader), and the opened descriptor is what is
checked (a regular file of the tree's owner) and read. A path refused is reported to
`on_skip` with why, relative to the tree's root.

The owner is the tree's root directory's, unless given: the agent makes each such
directory the job's uid (workers/node/isolation.py lay_out) inside a directory only the
agent writes, so the replica can neither change who owns it nor replace it.

What the agent writes into such a tree (a checkpoint restored from the store) and deletes
from it goes the same way: through directory descriptors, never a link, so a directory
swapped for a link cannot make root write or delete a file anywhere else.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger("cohort.storage")

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC
FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
MAX_DEPTH = 32  # directories below the root: each open level holds a descriptor
# open() on a link with O_NOFOLLOW: ELOOP (EMLINK on FreeBSD); a link or a file where a
# directory was: ENOTDIR; a socket: ENXIO.
_REFUSED_ERRNOS = {errno.ELOOP, errno.EMLINK, errno.ENOTDIR, errno.ENXIO}

OnSkip = Callable[[str, str], None]  # (path relative to the root, why)


class Refused(OSError):
    """A path of the tree that is not a regular file of its owner (or lies through a link)."""

    def __init__(self, rel: str, why: str) -> None:
        super().__init__(errno.EPERM, f"{rel}: {why}")
        self.rel, self.why = rel, why


def describe(mode: int) -> str:
    """Why a file of this mode is refused."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a fifo"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


class OwnedTree(os.PathLike[str]):
    """One directory another user writes; a path-like of its root, so it can be handed
    wherever a directory is (ArtifactStore.put_tree reads through it)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        owner: int | None = None,
        on_skip: OnSkip | None = None,
    ) -> None:
        self.root = Path(root)
        self.owner = owner
        self.on_skip = on_skip

    def __fspath__(self) -> str:
        return os.fspath(self.root)

    def __repr__(self) -> str:
        return f"OwnedTree({str(self.root)!r}, owner={self.owner})"

    def skip(self, rel: str, why: str) -> None:
        if self.on_skip is not None:
            self.on_skip(rel, why)
        else:
            log.debug("%s: %s is %s: not read", self.root, rel, why)

    def _open_root(self) -> tuple[int, int]:
        """(descriptor, owner) of the root: its own path is the agent's, never the
        replica's, but it is not followed either."""
        fd = os.open(self.root, DIR_FLAGS)
        return fd, self.owner if self.owner is not None else os.fstat(fd).st_uid

    def files(self) -> dict[str, os.stat_result]:
        """The regular files of the owner under the root, by '/'-joined relative path
        (their lstat); everything else met on the way goes to `skip` and is not entered.
        An advisory list: `open` checks each again, on the descriptor it reads."""
        found: dict[str, os.stat_result] = {}
        try:
            fd, owner = self._open_root()
        except OSError:
            return found  # not there (yet): nothing to read
        try:
            self._walk(fd, "", owner, found)
        finally:
            os.close(fd)
        return found

    def _walk(self, fd: int, head: str, owner: int, found: dict[str, os.stat_result]) -> None:
        try:
            names = sorted(os.listdir(fd))
        except OSError:
            return  # removed while walked
        for name in names:
            rel = f"{head}{name}"
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue  # removed since listed (a checkpoint rotated out)
            if info.st_uid != owner:
                self.skip(rel, f"owned by uid {info.st_uid}, not the job's")
            elif stat.S_ISREG(info.st_mode):
                found[rel] = info
            elif not stat.S_ISDIR(info.st_mode):
                self.skip(rel, describe(info.st_mode))
            elif rel.count("/") >= MAX_DEPTH:
                self.skip(rel, f"deeper than {MAX_DEPTH} directories")
            else:
                self._enter(fd, name, rel, owner, found)

    def _enter(
        self, fd: int, name: str, rel: str, owner: int, found: dict[str, os.stat_result]
    ) -> None:
        try:
            sub = os.open(name, DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in _REFUSED_ERRNOS:  # swapped for a link since its lstat
                self.skip(rel, "a symbolic link")
            return
        try:
            if os.fstat(sub).st_uid != owner:
                self.skip(rel, "a directory of another user")
            else:
                self._walk(sub, f"{rel}/", owner, found)
        finally:
            os.close(sub)

    def open(self, rel: str) -> int:
        """A descriptor reading the regular file `rel` of the owner, opened without
        following any link on the way (the caller closes it).

        Raises:
            Refused: a link on the way or in its place, not a regular file, another
                user's file (also reported to `skip`).
            FileNotFoundError: no such file (removed since listed).
        """
        return self._open_file(rel, FILE_FLAGS)

    def _open_file(self, rel: str, flags: int) -> int:
        """`rel` opened with `flags` (which hold O_NOFOLLOW), reached without following a
        link, and kept only if it is a regular file of the owner; else Refused."""
        try:
            fd, name, owner = self._parent(rel, create=False)
            try:
                file_fd = os.open(name, flags, dir_fd=fd)
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno in _REFUSED_ERRNOS:
                self.skip(rel, "a symbolic link (or lies under one)")
                raise Refused(rel, "a symbolic link") from None
            raise
        info = os.fstat(file_fd)
        why = None if stat.S_ISREG(info.st_mode) else describe(info.st_mode)
        if why is None and info.st_uid != owner:
            why = f"owned by uid {info.st_uid}, not the job's"
        if why is not None:
            os.close(file_fd)
            self.skip(rel, why)
            raise Refused(rel, why)
        return file_fd

    def names(self, rel_dir: str) -> list[str]:
        """The names in the directory `rel_dir` of the tree ('' for the root), reached
        without following a link; [] if it is not there. One directory, not a walk."""
        try:
            fd, _owner = self._open_dir(rel_dir)
        except (OSError, ValueError):
            return []
        try:
            return os.listdir(fd)
        except OSError:
            return []
        finally:
            os.close(fd)

    def read_bytes(self, rel: str) -> bytes | None:
        """The whole of the regular file `rel`, or None if it is gone or refused."""
        try:
            fd = self.open(rel)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as handle:
            return handle.read()

    def _parent(self, rel: str, *, create: bool) -> tuple[int, str, int]:
        """(descriptor of the directory `rel` is in, its last name, the owner): each
        directory on the way opened (with `create`, made first: 0700) following no link."""
        rel_dir, _, last = rel.rpartition("/")
        if last in ("", ".", ".."):
            raise ValueError(f"not a relative path in the tree: {rel!r}")
        fd, owner = self._open_dir(rel_dir, create=create)
        return fd, last, owner

    def _open_dir(self, rel_dir: str, *, create: bool = False) -> tuple[int, int]:
        """(descriptor of the directory `rel_dir` ('' for the root), the tree's owner):
        each directory on the way opened (with `create`, made first: 0700) following no
        link."""
        parts = rel_dir.split("/") if rel_dir else []
        if any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"not a relative path in the tree: {rel_dir!r}")
        fd, owner = self._open_root()
        try:
            for part in parts:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o700, dir_fd=fd)
                sub = os.open(part, DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = sub
        except BaseException:
            os.close(fd)
            raise
        return fd, owner

    def replace(
        self, rel: str, write: Callable[[BinaryIO], object], mtime: float | None = None
    ) -> os.stat_result:
        """Make `rel` a new file of what `write(handle)` writes (0600, dated `mtime`),
        written aside and renamed over whatever is there (a link is replaced, never
        followed); its stat. Nothing is left aside if `write` fails (a full disk)."""
        fd, name, _ = self._parent(rel, create=True)
        try:
            aside = f".{name}.{uuid.uuid4().hex}.partial"
            out = os.open(
                aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600, dir_fd=fd
            )
            try:
                with os.fdopen(out, "wb") as handle:
                    write(handle)
                if mtime is not None:
                    os.utime(aside, (mtime, mtime), dir_fd=fd, follow_symlinks=False)
                os.replace(aside, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(aside, dir_fd=fd)
                raise
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)

    def append(self, rel: str, write: Callable[[BinaryIO], object]) -> os.stat_result:
        """Add what `write(handle)` writes at the end of the regular file `rel` of the owner,
        reached without following a link (on the way or in its place); its stat after.
        For a file a reader follows as it grows (a TensorBoard event file, which a rename
        over it would hide from a reader that holds it open).

        Raises:
            Refused: a link on the way or in its place, not a regular file, another
                user's file (also reported to `skip`).
            FileNotFoundError: no such file.
        """
        # O_NONBLOCK: a fifo without a reader is refused (ENXIO), never waited on.
        out = self._open_file(rel, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC)
        with os.fdopen(out, "ab") as handle:
            write(handle)
            handle.flush()
            return os.fstat(handle.fileno())

    def unlink(self, rel: str) -> None:
        """Remove `rel` (a link itself, never what it names); gone already is no error."""
        try:
            fd, name, _ = self._parent(rel, create=False)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            if exc.errno in _REFUSED_ERRNOS:
                return  # under a link: not in this tree
            raise
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)

    def lstat(self, rel: str) -> os.stat_result | None:
        """`rel`'s own stat (a link's, never its target's), or None if it is not there."""
        try:
            fd, name, _ = self._parent(rel, create=False)
        except OSError:
            return None
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return None
        finally:
            os.close(fd)


def descriptor_path(fd: int) -> str:
    """A path naming the open file behind `fd` itself, for APIs that take a path (fsspec's
    put_file): opening /proc/self/fd/<n> reaches the file the descriptor has open, not
    whatever is at its old name now."""
    return f"/proc/self/fd/{fd}" if os.path.isdir("/proc/self/fd") else f"/dev/fd/{fd}"
