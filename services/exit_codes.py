"""What a replica's exit code means for a restart: the one classification table.

As Kubeflow's `ExitCode` restart policy does: codes of a program that is wrong
(1 general error, 2 misuse, 126 not executable, 127 not found, 128 invalid exit,
139 segfault) are permanent; codes of a process that was stopped from outside
(130 SIGINT, 137 SIGKILL, 143 SIGTERM) are retryable, and 138 (SIGUSR1's number)
is a trainer's own "retry me". A replica that was lost with its node or that
stopped making progress has no exit code; Cohort treats both as retryable.
"""

from __future__ import annotations

PERMANENT = frozenset({1, 2, 126, 127, 128, 139})
RETRYABLE = frozenset({130, 137, 138, 143})
TRAINER_RETRY = 138


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


def describe(exit_code: int | None) -> str:
    """A short label for the reason text."""
    if exit_code is None:
        return "no exit code"
    kind = "retryable" if is_retryable(exit_code) else "permanent"
    if exit_code > 128:
        import signal

        try:
            name = signal.Signals(exit_code - 128).name
            return f"code {exit_code} ({name}, {kind})"
        except ValueError:
            pass
    return f"code {exit_code} ({kind})"
