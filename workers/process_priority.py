"""A warm replica process's CPU priority: the lowest while it starts, then normal.

A warm process (workers/replica/pool_entry.py) usually starts right after a hand-off,
next to the replica that just began: for its first WARM_YIELD_SECONDS it runs at nice
WARM_NICE (the kernel gives it ~1.5 % of a busy core, all of an idle one), so that
replica reaches its first step undisturbed; then at normal priority, so that a busy node
still warms it up. Its agent raises it back (workers/node/pool.py), not a timer of its
own: importing TensorFlow loads its native library holding the GIL for seconds of CPU,
and at nice 19 on a busy machine those seconds took minutes, with no thread of the
process able to run meanwhile (beside six busy loops: a timer due at 5 s ran at 101 s,
the import ended at 110 s; raised at 5 s from outside, the import ended at 21 s).
"""

from __future__ import annotations

import errno
import os
import time

WARM_NICE = 19
WARM_YIELD_SECONDS = 5.0
RETRY_SECONDS = 0.02  # between tries while the kernel says "again" (its limit: 0.1 s)


def set_priority(nice: int, pid: int | None = None, wait: float = 0.0) -> bool:
    """Set the CPU priority of process `pid` (None: this one): its autogroup's nice (the
    kernel schedules a session as one group, and every warm process has a session of its
    own) and, as root (the only user who can raise it back), each of its threads'.

    The kernel allows an unprivileged user one autogroup change a tenth of a second,
    machine-wide, and says "try again" to the next: tried again for up to `wait` seconds
    (a replica handed to a warm process must not keep the warm nice because another
    process's change came just before). Returns False when the kernel still says so,
    True otherwise: a kernel without autogroups, or a process gone, leaves nothing to
    retry.
    """
    proc = f"/proc/{'self' if pid is None else pid}"
    deadline = time.monotonic() + wait
    while not _set_autogroup(proc, nice):
        if time.monotonic() >= deadline:
            return False
        time.sleep(RETRY_SECONDS)
    if os.geteuid() == 0:
        try:
            threads = os.listdir(f"{proc}/task")
        except OSError:
            return True
        for tid in threads:
            try:
                os.setpriority(os.PRIO_PROCESS, int(tid), nice)
            except OSError:
                continue  # a thread that ended meanwhile
    return True


def _set_autogroup(proc: str, nice: int) -> bool:
    """False if the kernel asked to try again later."""
    try:
        with open(f"{proc}/autogroup", "w", encoding="ascii") as handle:
            handle.write(str(nice))
    except OSError as exc:
        return exc.errno != errno.EAGAIN
    return True
