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


def stop_process_group(popen: subprocess.Popen[bytes], grace: float) -> int:
    """SIGTERM `popen`'s process group, SIGKILL the group if anything outlives `grace`
    seconds (children the leader left behind too); returns the leader's exit status."""
    pgid = popen.pid  # started with start_new_session: the group id is the leader's pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return popen.wait()  # nothing left in the group: the leader was reaped already
    try:
        popen.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return popen.wait()
