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


def stop_process_groups(popens: list[subprocess.Popen[bytes]], grace: float) -> list[int]:
    """`stop_process_group` for several groups at once: all are sent SIGTERM together and
    share one `grace`, so stopping N processes takes the slowest one's time, not the sum.
    Returns each leader's exit status, in order."""
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
    return [popen.wait() for popen in popens]
