"""What a replica's exit code means for a restart: the one classification table.

As Kubeflow's `ExitCode` restart policy does: codes of a program that is wrong
(1 general error, 2 misuse, 126 not executable, 127 not found, 128 invalid exit,
139 segfault) are permanent; codes of a process that was stopped from outside
(130 SIGINT, 137 SIGKILL, 143 SIGTERM) are retryable, and 138 (SIGUSR1's number)
is a trainer's own "retry me". A replica that was lost with its node or that
stopped making progress has no exit code; Cohort treats both as retryable.

A full DATA_DIR is named here too, once: the runner exits NO_SPACE when a write of
the replica's failed for want of space (ENOSPC), and the agent reports a replica it
could not lay out, fetch or start for that reason with the same code, so a job's
reason says "no space left on DATA_DIR" whichever of them met the full disk.
"""

from __future__ import annotations

import errno
import os

# ENOSPC's own number: the node's disk, not the program, so worth another attempt
# (the space may be freed, or the gang placed elsewhere). Few programs exit with it.
NO_SPACE = errno.ENOSPC
NO_SPACE_REASON = "no space left on DATA_DIR"
PERMANENT = frozenset({1, 2, 126, 127, 128, 139})
RETRYABLE = frozenset({NO_SPACE, 130, 137, 138, 143})
TRAINER_RETRY = 138
# How TensorFlow's C++ errors (ResourceExhaustedError from a checkpoint's SaveV2)
# say ENOSPC: they carry no errno, only its text.
_NO_SPACE_TEXT = os.strerror(errno.ENOSPC)


def is_retryable(exit_code: int | None) -> bool:
    """Whether a failure with this exit code (None: lost or hung) deserves another attempt."""
    if exit_code is None:
        return True
    if exit_code in RETRYABLE:
        return True
    if exit_code in PERMANENT:
        return False
    # Other signals (128 + n) came from outside the program; other codes from within.
    return exit_code > 128


def is_no_space(error: BaseException) -> bool:
    """Whether `error`, or an error it was raised from or while handling, is a write
    that failed for want of space (ENOSPC, or TensorFlow's text of it)."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            return True
        if _NO_SPACE_TEXT in str(cause):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def describe(exit_code: int | None) -> str:
    """A short label for the reason text."""
    if exit_code is None:
        return "no exit code"
    kind = "retryable" if is_retryable(exit_code) else "permanent"
    if exit_code == NO_SPACE:
        return f"code {exit_code} ({NO_SPACE_REASON}, {kind})"
    if exit_code > 128:
        import signal

        try:
            name = signal.Signals(exit_code - 128).name
            return f"code {exit_code} ({name}, {kind})"
        except ValueError:
            pass
    return f"code {exit_code} ({kind})"
