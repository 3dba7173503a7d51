"""The guard a job's command runs under, for real processes: it passes the program's exit
status through, and stops the program when the agent that started it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

GUARD = [sys.executable, "-P", "-m", "workers.node.guard"]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def guarded(program: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*GUARD, str(os.getpid()), "--", sys.executable, "-c", program], start_new_session=True
    )


def answering(tmp_path: Path) -> subprocess.Popen[bytes]:
    """A guarded program that answers "checkpoint now" as docs/your-code.md tells one to
    (a flag, then exit 75, ignoring any later request), once it is ready for it."""
    ready = tmp_path / "ready"
    program = (
        "import pathlib, signal, sys, time\n"
        "asked = []\n"
        "signal.signal(signal.SIGUSR1, lambda *_: asked.append(1))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "while not asked:\n"
        "    time.sleep(0.01)\n"
        "signal.signal(signal.SIGUSR1, signal.SIG_IGN)\n"
        "sys.exit(75)\n"
    )
    guard = guarded(program)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return guard


def test_the_programs_exit_status_is_the_guards() -> None:
    assert guarded("import sys; sys.exit(3)").wait(30) == 3
    assert guarded("import os; os.kill(os.getpid(), 9)").wait(30) == 137  # as a shell says


def test_sigterm_to_the_group_stops_the_program_and_reports_it(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    guard = guarded(f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); time.sleep(60)")
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(guard.pid, signal.SIGTERM)  # what the agent's stop does
    assert guard.wait(30) == 143


def test_sigusr1_to_the_group_reaches_the_program_and_its_answer_is_the_guards(
    tmp_path: Path,
) -> None:
    """A drain's "checkpoint now" (workers/node/checkpoint_now.py): SIGUSR1 to the whole
    group. The guard outlives it (by default it would die of it, leaving the program
    unsupervised) and reports the program's own answer, 75 once it has saved."""
    guard = answering(tmp_path)
    os.killpg(guard.pid, signal.SIGUSR1)
    assert guard.wait(30) == 75


def test_the_program_stops_when_its_agent_dies(tmp_path: Path) -> None:
    pid_file = tmp_path / "program.pid"
    program = (
        f"import os, pathlib, time; pathlib.Path({str(pid_file)!r}).write_text("
        "str(os.getpid())); time.sleep(120)"
    )
    # A stand-in agent: starts the guard as the agent does, then waits to be killed.
    agent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import os, subprocess, sys, time; "
                f"subprocess.Popen({[*GUARD]!r} + [str(os.getpid()), '--', sys.executable, '-c', "
                f"{program!r}], start_new_session=True); time.sleep(120)"
            ),
        ]
    )
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    assert alive(pid)
    agent.kill()
    agent.wait()
    deadline = time.monotonic() + 15
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid), "the program outlived its agent"


def test_requests_that_keep_coming_leave_the_programs_answer_the_guards(tmp_path: Path) -> None:
    """SIGUSR1 after SIGUSR1 to the group (an operator's drain, then the node's own
    shutdown notice), until the guard is gone: the guard reports the program's 75, never
    dies of a request itself (138) while it ends. The program ignores the requests once it
    has answered, as docs/your-code.md tells a program to."""
    guard = answering(tmp_path)
    deadline = time.monotonic() + 30
    sent = 0
    while guard.poll() is None and time.monotonic() < deadline:
        try:
            os.killpg(guard.pid, signal.SIGUSR1)
        except ProcessLookupError:  # the group is gone: the guard has exited
            break
        sent += 1
        time.sleep(0.0005)
    assert guard.wait(30) == 75
    assert sent > 1
