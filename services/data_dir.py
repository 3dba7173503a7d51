"""DATA_DIR's modes: what a replica on the same host can reach of it (docs/security.md).

Every Cohort process on a node shares one host with hostile code: the replicas, which an
agent running as root runs as their job's own uid (workers/node/isolation.py). DATA_DIR
is 0711, so a replica passes through it to its own job's directory (under `jobs/`, laid
out by isolation.py) and lists nothing; every other entry (the SQLite file, its WAL and
shared memory, the signing key, the bootstrap token, the Redis password, `artifacts/`,
`cache/`, `uploads/`, `logs/`, `redis/`) is its owner's alone: 0700 directories, 0600
files. What Cohort's processes create later is too: each runs under umask 077
(cli/main.py). `private_data_dir` also fixes a DATA_DIR an older version left readable
to all (0755 and 0644): a 0700 directory closes everything below it, so the entries
directly in DATA_DIR are all it changes, whatever their trees hold.

Standard library only: services/settings.py calls it where DATA_DIR is first used.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import tempfile
from pathlib import Path

log = logging.getLogger("cohort.data_dir")

DATA_DIR_MODE = 0o711  # others pass through to their job's directory, list nothing
PROCESS_UMASK = 0o077  # of every Cohort service process and what it starts
# Entries other users must pass through, with the modes isolation.py gives them.
# envs/: the job environments replicas run their interpreter from (workers/node/envs.py).
PASS_THROUGH = {"jobs": 0o711, "envs": 0o711}


def owner_only(mode: int) -> int:
    """`mode` without any group or other permission."""
    return stat.S_IMODE(mode) & 0o700


def make_private(name: str, dir_fd: int, mode: int | None = None) -> None:
    """Take group and other permissions off the entry `name` of the directory `dir_fd`
    (or give it `mode`), never through a link: a link is left as it is (Linux has no
    mode of a link to change, and its target is not ours to change)."""
    try:
        fd = os.open(
            name,
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY,
            dir_fd=dir_fd,
        )
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOENT, errno.ENXIO):
            log.warning("cannot make %s private: %s", name, exc)
        return  # a link, removed meanwhile, or a socket
    try:
        current = stat.S_IMODE(os.fstat(fd).st_mode)
        wanted = owner_only(current) if mode is None else mode
        if current != wanted:
            os.fchmod(fd, wanted)
    except OSError as exc:  # another user's file: say so, the process still starts
        log.warning("cannot make %s private: %s", name, exc)
    finally:
        os.close(fd)


def private_data_dir(path: Path) -> Path:
    """Create DATA_DIR at `path` (mode 0711) if need be and give it and its entries the
    modes above; returns `path`."""
    path.mkdir(mode=DATA_DIR_MODE, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != DATA_DIR_MODE:
            try:
                os.fchmod(fd, DATA_DIR_MODE)
            except OSError as exc:
                log.warning("cannot make %s private: %s", path, exc)
        for entry in os.scandir(fd):
            if entry.is_dir(follow_symlinks=False):
                make_private(entry.name, fd, PASS_THROUGH.get(entry.name, 0o700))
            elif not entry.is_symlink():
                make_private(entry.name, fd)
    finally:
        os.close(fd)
    return path


def write_private(path: Path, text: str) -> None:
    """Write `path` whole or not at all, readable by this user only (mkstemp's 0600).

    The directory may be a replica's (one started again in place): the temporary file
    gets a fresh name, created exclusively (never through a link put there), and
    replaces `path` by rename, which replaces a link rather than follows it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
