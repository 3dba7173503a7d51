"""Cohort's own unpacker: writes an archive's admitted members under one directory.

It never calls `tarfile`'s extraction (`extract`, `extractall`, their filters): those
decide from what is already on disk, and Python before 3.11.13 / 3.12.11 / 3.13.4 lets
an archive through them that writes anywhere (CVE-2025-4517). We chose this over
refusing those interpreters: Cohort then runs safely on every Python it supports.

Everything is decided from the archive's names (archive_members.MemberTree); the disk
is only written, never asked. Each path is opened one component at a time from a
directory descriptor with O_NOFOLLOW (openat), files are created O_EXCL|O_NOFOLLOW, and
symlinks are made last, after the whole tree is checked, so no write ever goes through a
link, whatever the archive holds.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from typing import IO

from services.storage.archive_members import Limits, Placed
from services.storage.archive_stream import ArchiveRead, read_archive

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class _DiskTree:
    """Members written under the directory open as `root_fd`; `replace`: an existing
    file, link or empty name is replaced (unlinked first, never written through)."""

    def __init__(self, root_fd: int, replace: bool) -> None:
        self.root_fd = root_fd
        self.replace = replace
        # The last directory written into: members come grouped by directory.
        self._last: tuple[tuple[str, ...], int] | None = None

    def close(self) -> None:
        if self._last is not None:
            os.close(self._last[1])
            self._last = None

    def _walk(self, parts: tuple[str, ...]) -> int:
        """A new descriptor of the directory `parts`, made where missing, no link followed."""
        fd = os.open(".", _DIR_FLAGS, dir_fd=self.root_fd)
        try:
            for depth, part in enumerate(parts):
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    raise NotADirectoryError(
                        errno.ENOTDIR,
                        "exists and is not a directory (a link is never followed)",
                        "/".join(parts[: depth + 1]),
                    ) from None
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def directory(self, parts: tuple[str, ...]) -> int:
        if self._last is None or self._last[0] != parts:
            fd = self._walk(parts)
            self.close()
            self._last = (parts, fd)
        return self._last[1]

    def _clear(self, name: str, parent: int) -> None:
        """Make room for `name` when replacing: unlinkat never follows a link, and
        refuses a directory."""
        if self.replace:
            try:
                os.unlink(name, dir_fd=parent)
            except FileNotFoundError:
                pass

    def write(self, placed: Placed, chunks: Iterable[bytes]) -> None:
        if placed.kind == "dir":
            self.directory(placed.parts)
            return
        parent, name = self.directory(placed.parts[:-1]), placed.parts[-1]
        if placed.kind == "symlink":
            self._clear(name, parent)
            os.symlink(placed.link, name, dir_fd=parent)
        elif placed.kind == "hardlink":
            self._clear(name, parent)
            source = self._walk(placed.source[:-1])
            try:
                os.link(
                    placed.source[-1],
                    name,
                    src_dir_fd=source,
                    dst_dir_fd=parent,
                    follow_symlinks=False,
                )
            finally:
                os.close(source)
        else:
            self._file(name, parent, placed.mode, chunks)

    def _file(self, name: str, parent: int, mode: int, chunks: Iterable[bytes]) -> None:
        try:
            fd = os.open(name, _FILE_FLAGS, mode, dir_fd=parent)  # the umask applies too
        except FileExistsError:
            if not self.replace:
                raise
            self._clear(name, parent)
            fd = os.open(name, _FILE_FLAGS, mode, dir_fd=parent)
        with open(fd, "wb", closefd=True) as out:
            for chunk in chunks:
                out.write(chunk)


def write_archive(source: IO[bytes], dest_fd: int, limits: Limits, *, replace: bool = False) -> int:
    """Write the `.tar.gz` `source`'s members under the directory open as `dest_fd`;
    returns its number of files (non-directories).

    A refusal met midway (an archive that changed since it was checked) leaves what was
    written so far, all of it inside `dest_fd`'s directory, and no link: check first
    (bundles.check_archive) to write nothing at all.

    Raises:
        BundleRejected: what archive_stream.read_archive refuses.
        OSError: the disk refused a write (ENOSPC, or a name in the way when not
            `replace`).
    """
    state = ArchiveRead(limits)
    tree = _DiskTree(dest_fd, replace)
    try:
        for placed, chunks in read_archive(source, state):
            tree.write(placed, chunks)
    finally:
        tree.close()
    return state.files
