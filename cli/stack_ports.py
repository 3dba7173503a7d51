"""The ports a `cohort up` stack takes on its machine: the api's, the embedded Redis's and
the replicas' range, so that two stacks (two DATA_DIRs) run side by side.

An explicit setting (COHORT_API_PORT, COHORT_EMBEDDED_REDIS_PORT,
COHORT_PORT_RANGE_START/_END) is always used as given; a listener's port that another
process holds stops the stack with one line naming the setting. Unset:
- the api and the embedded Redis take their usual port (8000, 6389) if it is free, else one
  the kernel gives. Both listen at once, so a probe only races a process that binds in the
  same instant. The Redis port is written to DATA_DIR/redis-port, where every process of
  that DATA_DIR reads it (Settings.embedded_redis_port), the stack's own get it in
  COHORT_REDIS_URL; the api's is in COHORT_API_PORT, and in the URL the stack prints and
  saves (cli/user_config.py).
- the replicas' range is the first 500-port range, from 29500, that no other stack on this
  machine holds. Not probed: a range is used port by port long after it is chosen, and an
  idle stack listens on none of it, so probing would give two idle stacks the same range.
  A stack holds an exclusive flock on RANGE_LOCKS/<start> for its life instead; the kernel
  drops it when the process ends, by SIGKILL too, so a crashed stack leaves no stale claim.
  A range where something listens is skipped as well (a stack given its range explicitly
  takes no lock). Ranges stay below the kernel's ephemeral range, whose ports it hands to
  any process (workers/node/ports.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
from pathlib import Path

from services.settings import Settings
from workers.node.ports import listening_ports

RANGE_WIDTH = 500
FIRST_RANGE = 29500
LOWEST_RANGE = 20000
# Machine-wide (every user's stacks), sticky like /tmp: a user may lock, not remove,
# another's file.
RANGE_LOCKS = Path(tempfile.gettempdir()) / "cohort-port-ranges"


class StackPortTaken(RuntimeError):
    """A port the settings name is held by another process."""


def port_taken(port: int) -> bool:
    """Whether something listens on 127.0.0.1:`port` (a Redis that wants a password
    answers an unauthenticated PING with an error, so a connection is what tells)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def kernel_free_port() -> int:
    """A port nothing listens on now, as the kernel hands them out."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listener_port(settings: Settings, field: str, usual: int) -> int:
    """The port for a listener of the stack: the setting `field` if set (refused if taken),
    else `usual` if free, else one the kernel gives."""
    if field in settings.model_fields_set:
        port = int(getattr(settings, field))
        if port_taken(port):
            raise StackPortTaken(
                f"port {port} (COHORT_{field}) is taken by another process: stop it, or "
                f"choose another port, or unset COHORT_{field} to let `cohort up` choose"
            )
        return port
    return usual if not port_taken(usual) else kernel_free_port()


def _ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def candidate_ranges() -> list[int]:
    """Starts of the ranges to try: up from 29500 below the ephemeral range, then down."""
    low = _ephemeral_low()
    upward = list(range(FIRST_RANGE, low - RANGE_WIDTH + 1, RANGE_WIDTH))
    downward = list(range(FIRST_RANGE - RANGE_WIDTH, LOWEST_RANGE - 1, -RANGE_WIDTH))
    return upward + downward


def hold_range(start: int) -> int | None:
    """An open descriptor holding the range's lock (until it is closed), or None if
    another stack holds it."""
    RANGE_LOCKS.mkdir(mode=0o1777, exist_ok=True)
    with contextlib.suppress(OSError):
        os.chmod(RANGE_LOCKS, 0o1777)  # mkdir's mode passes through the umask
    path = RANGE_LOCKS / str(start)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError:
        return None  # another user's file we cannot open: theirs
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def claim_range(settings: Settings) -> tuple[int, int, int | None]:
    """(start, end, lock descriptor) of the replicas' range: the settings' own if either
    end is set (no lock), else the first free range, locked until the descriptor closes."""
    if {"PORT_RANGE_START", "PORT_RANGE_END"} & settings.model_fields_set:
        return settings.PORT_RANGE_START, settings.PORT_RANGE_END, None
    for start in candidate_ranges():
        end = start + RANGE_WIDTH - 1
        fd = hold_range(start)
        if fd is None:
            continue
        if listening_ports(start, end):
            os.close(fd)
            continue
        return start, end, fd
    raise StackPortTaken(
        f"every replica port range of {RANGE_WIDTH} from {LOWEST_RANGE} is held by another "
        "stack on this machine: set COHORT_PORT_RANGE_START and COHORT_PORT_RANGE_END"
    )
