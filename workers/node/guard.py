"""`python -m workers.node.guard AGENT_PID -- PROGRAM ARGS...`: run a job's command so that
it stops when the agent that started it dies.

Cohort's runner watches its agent itself (workers/replica/parent_watch.py); a user's program
does not. Left alone it would outlive a killed agent and keep training next to the gang
the scheduler places again elsewhere. This guard is the process group's leader: it runs
the program as its child (same group, same environment), waits for it and exits with its
status (128+N for a signal, as a shell reports it); if its parent changes (the agent is
gone) it stops the group: SIGTERM, then SIGKILL after a grace period. SIGTERM from the
agent reaches the whole group, the program included; the guard itself only waits. So does
SIGUSR1, the agent's "checkpoint now" (workers/node/checkpoint_now.py): the program saves
and exits 75, which the guard passes on; without its handler the guard would die of it.
Standard library only: it starts in milliseconds and imports nothing of Cohort's (the
agent runs it by its file for a container, so the guard is the agent's own).

`--container ENGINE NAME`: the program is the engine's client running container NAME
(workers/node/containers.py), which a signal to the client does not stop for certain:
when the agent is gone the guard has the engine stop it (SIGTERM, SIGKILL after the grace).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

POLL_SECONDS = 1.0
GRACE_SECONDS = 10.0
EXEC_FAILED = 126  # found but could not be run, as a shell reports it


def _status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _stop_group(child: subprocess.Popen[bytes]) -> int:
    os.killpg(0, signal.SIGTERM)  # the guard's handler ignores it; the program's does not
    try:
        return _status(child.wait(timeout=GRACE_SECONDS))
    except subprocess.TimeoutExpired:
        os.killpg(0, signal.SIGKILL)  # the guard goes too
        return 137


def _stop_container(child: subprocess.Popen[bytes], engine: str, name: str) -> int:
    grace = str(int(GRACE_SECONDS))
    try:
        subprocess.run(  # noqa: S603 - an argv, never a shell
            [engine, "stop", "--time", grace, name],
            capture_output=True,
            timeout=GRACE_SECONDS + 60,
            check=False,
        )
        return _status(child.wait(timeout=GRACE_SECONDS))
    except (OSError, subprocess.TimeoutExpired):
        return _stop_group(child)


def main(argv: list[str]) -> int:
    container: list[str] = []
    if len(argv) > 3 and argv[1] == "--container":
        container, argv = argv[2:4], [argv[0], *argv[4:]]
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print(  # noqa: T201
            "usage: python -m workers.node.guard AGENT_PID [--container ENGINE NAME] "
            "-- PROGRAM [ARGS...]",
            file=sys.stderr,
        )
        return 2
    agent_pid, program = int(argv[0]), argv[2:]
    # A handler, not SIG_IGN: an ignored signal stays ignored in the program after exec.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: None)
    signal.signal(signal.SIGUSR1, lambda _signum, _frame: None)
    try:
        child = subprocess.Popen(program)  # noqa: S603 - the job's argv, never a shell
    except OSError as exc:
        print(f"cohort: could not run {program[0]}: {exc}", file=sys.stderr)  # noqa: T201
        return 127 if isinstance(exc, FileNotFoundError) else EXEC_FAILED
    while True:
        try:
            return _status(child.wait(timeout=POLL_SECONDS))
        except subprocess.TimeoutExpired:
            pass
        if os.getppid() != agent_pid:
            print(f"cohort: agent {agent_pid} is gone; stopping", file=sys.stderr)  # noqa: T201
            return _stop_container(child, *container) if container else _stop_group(child)


def _ended() -> None:
    """The program has ended: both signals ignored from here on. Python's shutdown gives
    them their default action back, and a late one would end the guard with its own
    status (143, 138) instead of passing on the program's."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    finally:
        _ended()
    sys.exit(code)
