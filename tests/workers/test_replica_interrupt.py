"""The replica's stop for want of space (its metrics file cannot be written: it interrupts
its main thread) works in a replica that inherited SIGINT ignored, as every replica does
whose agent a non-interactive shell started in the background."""

from __future__ import annotations

import signal
import subprocess
import sys

SCRIPT = """
import time
from workers.replica import runner, termination
termination.install([])
runner._running.set()
try:
    runner._stop_for_no_space()
    time.sleep(10)
    print("ran on")
except KeyboardInterrupt:
    print("stopped", runner._no_space.is_set())
"""


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_the_no_space_stop_interrupts_a_replica_started_with_sigint_ignored() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        preexec_fn=_ignore_sigint,  # noqa: PLW1509 - one call, no lock taken
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout.strip() == "stopped True", done.stdout + done.stderr
