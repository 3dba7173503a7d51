"""Stopping several process groups at once (workers/node/processes.py): one shared grace,
whatever each group's leader left behind ends too, a leader already gone is no error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from workers.node.processes import stop_process_groups

# A leader that ignores SIGTERM and forks a child that does too: only SIGKILL ends them.
STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    time.sleep(600)
print(os.getpid(), flush=True)
time.sleep(600)
"""


def start(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE
    )


def group_alive(pgid: int) -> bool:
    """A member of the group that is not a zombie (an orphan's reaping by init can lag)."""
    for member in psutil.process_iter():
        try:
            if os.getpgid(member.pid) == pgid and member.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return False


def test_groups_share_one_grace_and_nothing_of_them_is_left() -> None:
    stubborn = [start(STUBBORN) for _ in range(3)]
    for popen in stubborn:
        assert popen.stdout is not None and popen.stdout.readline()  # both forks are up
    polite = start("import time; print(1, flush=True); time.sleep(600)")
    assert polite.stdout is not None and polite.stdout.readline()
    gone = start("pass")
    gone.wait()

    began = time.monotonic()
    codes = stop_process_groups([*stubborn, polite, gone], grace=1.0)
    took = time.monotonic() - began

    # One grace for all three stubborn groups, not one each.
    assert 1.0 <= took < 2.5, took
    assert codes[:3] == [-signal.SIGKILL] * 3
    assert codes[3] == -signal.SIGTERM
    assert codes[4] == 0
    for popen in [*stubborn, polite]:
        assert not group_alive(popen.pid), "a forked child outlived its group's stop"
