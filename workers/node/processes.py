"""Stopping a process and everything it started: one rule for the agent and the CLI.

Node code and `cohort up` (cli/stack.py) both start children in their own session
(`start_new_session=True`), so a child's process group holds it and whatever it
forked. This lives with the node's code because that is where processes are
supervised; it is standard library only, so the CLI and the tests import it without
Celery or TensorFlow (services/ holds no OS process handling).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time


def stop_process_group(popen: subprocess.Popen[bytes], grace: float) -> int:
    """SIGTERM `popen`'s process group, SIGKILL the group if anything outlives `grace`
    seconds (children the leader left behind too); returns the leader's exit status."""
    return stop_process_groups([popen], grace)[0]


# After SIGKILL, the longest the groups' members may take to be gone (one in
# uninterruptible sleep dies when its I/O ends).
KILLED_WAIT = 5.0


def stop_process_groups(popens: list[subprocess.Popen[bytes]], grace: float) -> list[int]:
    """`stop_process_group` for several groups at once: all are sent SIGTERM together and
    share one `grace`, so stopping N processes takes the slowest one's time, not the sum.
    Returns each leader's exit status, in order, once nothing of the groups is alive."""
    signalled = []
    for popen in popens:  # started with start_new_session: the group id is the leader's pid
        try:
            os.killpg(popen.pid, signal.SIGTERM)
            signalled.append(popen)
        except ProcessLookupError:
            pass  # nothing left in the group: the leader was reaped already
    deadline = time.monotonic() + grace
    for popen in signalled:
        try:
            popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    codes = [popen.wait() for popen in popens]
    # A SIGKILL is delivered when its target next runs: on a busy machine a child the
    # leader forked can still be running when the leader has been reaped. "Stopped"
    # means gone (a stack started again must find its ports free).
    _wait_gone({popen.pid for popen in signalled}, KILLED_WAIT)
    return codes


def _wait_gone(groups: set[int], timeout: float) -> None:
    """Until no process of these groups is alive, or `timeout`. A zombie is not alive:
    its parent (init, for an orphan) reaps it when it gets to it."""
    deadline = time.monotonic() + timeout
    while groups and _alive_in(groups) and time.monotonic() < deadline:
        time.sleep(0.01)


def _alive_in(groups: set[int]) -> bool:
    """Whether a live process belongs to one of these process groups (/proc; where there
    is none, nothing can be told: no)."""
    try:
        entries = [entry.name for entry in os.scandir("/proc") if entry.name.isdigit()]
    except OSError:
        return False
    for pid in entries:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[0] not in (b"Z", b"X") and int(fields[2]) in groups:  # state, pgrp
            return True
    return False
