"""What a replica's exit code means for a restart: the one classification table.

Three kinds. *Retryable*: the process was stopped from outside (130 SIGINT, 137 SIGKILL,
143 SIGTERM and other signals), 138 (SIGUSR1's number) is a trainer's own "retry me", 28
a full DATA_DIR, and a replica lost with its node or hung (no exit code). *Permanent*: the
program cannot run as given, and the same code fails the same way on any attempt (2
misuse, 78 GPUs its TensorFlow cannot see, 126 not executable, 127 not found, 128 invalid
exit, 139 segfault), and a Python program whose last words are its interpreter's own
SyntaxError, IndentationError, TabError, ImportError or ModuleNotFoundError (exit 1).
*Program error*: any other code, 1 above all, is the program's own failure, which may or
may not happen again (an uncaught network error exits 1 too).

The policies (services/cluster/gang_outcome.py): `exit_code` restarts only retryable
failures, `on_failure` every failure but a permanent one, `never` none. Exit code 1 alone
cannot tell a SyntaxError from a dropped connection, hence the log's last line: a Python
interpreter that could not compile or import the program ends its traceback with the
error's name, and the agent reports the log's tail with the exit.

A replica asked to "checkpoint now" (a drained node, a preemption notice: SIGUSR1 from its
agent) answers by saving its checkpoint and exiting CHECKPOINTED (75, sysexits' EX_TEMPFAIL):
not a failure at all, the gang is placed again and resumes from what it saved.

A full DATA_DIR is named here too, once: the runner exits NO_SPACE when a write of
the replica's failed for want of space (ENOSPC), and the agent reports a replica it
could not lay out, fetch or start for that reason with the same code, so a job's
reason says "no space left on DATA_DIR" whichever of them met the full disk.
"""

from __future__ import annotations

import errno
import os
import re
from enum import StrEnum

# ENOSPC's own number: the node's disk, not the program, so worth another attempt
# (the space may be freed, or the gang placed elsewhere). Few programs exit with it.
NO_SPACE = errno.ENOSPC
NO_SPACE_REASON = "no space left on DATA_DIR"
PERMANENT = frozenset({2, 78, 126, 127, 128, 139})
# Saved its checkpoint on request and stopped (docs/failures.md, "Drains"): retryable, and
# what a drain waits for.
CHECKPOINTED = 75
CHECKPOINTED_REASON = "checkpointed on request"
RETRYABLE = frozenset({NO_SPACE, CHECKPOINTED, 130, 137, 138, 143})
TRAINER_RETRY = 138
PYTHON_ERROR = 1
# The last line of a Python traceback the interpreter printed because it could not
# compile or import the program: anchored at the line's start, as the interpreter
# writes it (the program's own output could say it too, at its own expense).
_PYTHON_PERMANENT = re.compile(
    r"^(SyntaxError|IndentationError|TabError|ImportError|ModuleNotFoundError)(:|$)"
)
# How TensorFlow's C++ errors (ResourceExhaustedError from a checkpoint's SaveV2)
# say ENOSPC: they carry no errno, only its text.
_NO_SPACE_TEXT = os.strerror(errno.ENOSPC)


class FailureKind(StrEnum):
    """What a failure deserves (the words in a job's reason)."""

    RETRYABLE = "retryable"
    PERMANENT = "permanent"
    PROGRAM_ERROR = "program error"


def python_error(log_tail: str) -> str | None:
    """The interpreter's name for a program it could not compile or import, when the
    log ends with one (SyntaxError, ImportError...); None otherwise."""
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
    match = _PYTHON_PERMANENT.match(lines[-1]) if lines else None
    return match.group(1) if match else None


def classify(exit_code: int | None, log_tail: str = "") -> FailureKind:
    """The kind of a failure with this exit code (None: lost or hung) and log tail."""
    if is_retryable(exit_code):
        return FailureKind.RETRYABLE
    if exit_code in PERMANENT:
        return FailureKind.PERMANENT
    if exit_code == PYTHON_ERROR and python_error(log_tail):
        return FailureKind.PERMANENT
    return FailureKind.PROGRAM_ERROR


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


def describe(exit_code: int | None, log_tail: str = "") -> str:
    """A short label for the reason text: the code, its meaning, its kind."""
    if exit_code is None:
        return "no exit code"
    kind = classify(exit_code, log_tail).value
    if exit_code == NO_SPACE:
        return f"code {exit_code} ({NO_SPACE_REASON}, {kind})"
    if exit_code == CHECKPOINTED:
        return f"code {exit_code} ({CHECKPOINTED_REASON}, {kind})"
    if exit_code == PYTHON_ERROR and (error := python_error(log_tail)):
        return f"code {exit_code} ({error}, {kind})"
    if exit_code > 128:
        import signal

        try:
            name = signal.Signals(exit_code - 128).name
            return f"code {exit_code} ({name}, {kind})"
        except ValueError:
            pass
    return f"code {exit_code} ({kind})"
