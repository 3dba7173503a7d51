"""How a replica answers signals: SIGTERM ends it with 143 (its main thread unwound, or a
watchdog's exit when it cannot be), SIGUSR1 asks for a checkpoint (backups.py), SIGINT
interrupts as by default; and once its work is done, neither SIGUSR1 nor SIGTERM ends it
with a code not its own (`done`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType

from workers.replica.backups import CHECKPOINT_SIGNAL, install_checkpoint_signal
from workers.replica.callbacks import ReplicaReporter, warn
from workers.replica.signal_flags import SignalFlag

EXIT_TERMINATED = 143  # 128 + SIGTERM, what a shell would report
# After SIGTERM, how long the main thread gets to unwind before the watchdog
# flushes what it can and exits (the main thread may be stuck inside a
# TensorFlow collective waiting for a dead peer, where Python handlers never run).
GRACE = 5.0

# Set as soon as SIGTERM arrives. The SystemExit raised by the handler may reach
# `main` disguised: raised while TensorFlow builds an exception, pybind11 turns it
# into a RuntimeError. The exit code must still say "terminated".
terminated = SignalFlag()  # set by the handler below: no lock (signal_flags.py)


def _on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    # Unwind the main thread like any exception, so `main` can flush metrics.
    terminated.set()
    raise SystemExit(EXIT_TERMINATED)


def handle_sigterm() -> None:
    """(Re-)install the SIGTERM handler that raises SystemExit(143) in the main thread."""
    signal.signal(signal.SIGTERM, _on_sigterm)


def install(reporter_box: list[ReplicaReporter]) -> None:
    """SIGTERM: SystemExit(143), and a watchdog for when it can't; SIGINT as by default."""
    handle_sigterm()
    install_checkpoint_signal()  # SIGUSR1: a flag for the trainer's backups.py callback
    # The stop for want of space interrupts the main thread (_thread.interrupt_main), which
    # does nothing while SIGINT is ignored: as a replica inherits it from an agent that a
    # non-interactive shell started in the background (CI's `make test`, `cohort up &`).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # A Python handler only runs once the main thread is back in the interpreter.
    # The C-level handler also writes the signal number to this pipe, which a
    # thread can read at once; it gives the main thread a grace period and then
    # exits the process itself.
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)

    def watchdog() -> None:
        while os.read(read_fd, 1)[0] != signal.SIGTERM:
            pass
        terminated.set()
        threading.Event().wait(GRACE)
        warn(f"still running {GRACE:.0f}s after SIGTERM; exiting")
        if reporter_box:
            reporter_box[0].flush(lock_timeout=1.0)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_TERMINATED)

    threading.Thread(target=watchdog, name="cohort-sigterm-watchdog", daemon=True).start()


def done() -> None:
    """The replica's work is over: a "checkpoint now" has nothing left to save. Ignored,
    not left to its handler: Python's shutdown restores the default action of every signal
    it handles, and a late request (a drain reaching a replica that has just finished, or
    has answered already) would end the process as 138 instead of its own code."""
    signal.signal(CHECKPOINT_SIGNAL, signal.SIG_IGN)
