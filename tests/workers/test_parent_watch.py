"""A replica ends when its agent dies, even while its main thread holds the GIL
(workers/replica/parent_watch.py). TensorFlow holds it while a replica joins its gang;
here a regular expression that backtracks for ever holds it the same way."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from tests.e2e.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]

# The "replica": the watcher first, as the runner starts it; then a wait that never
# gives the GIL back (catastrophic backtracking inside the C regex engine), or an exit.
# Its SIGTERM handler is a Python one, as the runner's: it never runs while the GIL is held
# by a call that signals do not interrupt ("wedge"; the regex engine checks for signals).
REPLICA = textwrap.dedent("""
    import re, signal, sys
    from workers.replica import parent_watch
    watcher = parent_watch.start(term_grace=float(sys.argv[2]))
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    print(watcher, flush=True)
    if sys.argv[1] == "hold":
        re.match(r"(a+)+$", "a" * 64 + "b")
    elif sys.argv[1] == "wedge":  # a C call that keeps the GIL and that no signal ends:
        import ctypes  # a default mutex locked twice (PyDLL: the GIL is not released)
        libc, mutex = ctypes.PyDLL(None), ctypes.create_string_buffer(64)
        libc.pthread_mutex_lock(mutex)
        libc.pthread_mutex_lock(mutex)
""")
TERM_GRACE = 3.0

# The "agent": starts the replica in a session of its own (as the agent does), says
# its pid, and waits to be killed.
AGENT = textwrap.dedent("""
    import os, subprocess, sys, time
    env = {**os.environ, "COHORT_AGENT_PID": str(os.getpid())}
    replica = subprocess.Popen([sys.executable, "-c", *sys.argv[1:]], env=env,
                               start_new_session=True, stdout=subprocess.PIPE, text=True)
    watcher = replica.stdout.readline().strip()
    print(replica.pid, watcher, flush=True)
    replica.wait()
    time.sleep(3600)
""")


def start_agent(
    mode: str, replica: str = REPLICA, grace: float = TERM_GRACE
) -> tuple[subprocess.Popen[str], int, int]:
    """The agent, and the pids of its replica (the program `replica`, given `mode` and
    `grace`) and of the replica's watcher."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("COHORT_AGENT_PID", None)
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT, replica, mode, str(grace)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert agent.stdout is not None
    replica, watcher = (int(x) for x in agent.stdout.readline().split())
    return agent, replica, watcher


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@contextlib.contextmanager
def agent_and_replica(
    mode: str, replica_program: str = REPLICA, grace: float = TERM_GRACE
) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    """An agent and its replica in `mode` ("wedge": once wedged, the GIL held and deaf to
    signals); whatever of them is left SIGKILLed after."""
    agent, replica, watcher = start_agent(mode, replica_program, grace)
    try:
        if mode == "wedge":
            wait_for(
                lambda: "futex" in Path(f"/proc/{replica}/wchan").read_text(),
                10,
                "the replica to wedge",
            )
        yield agent, replica, watcher
    finally:
        for pid in (replica, watcher):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()


def test_a_replica_holding_the_gil_ends_when_its_agent_is_killed() -> None:
    with agent_and_replica("hold") as (agent, replica, watcher):
        time.sleep(2.5)  # two looks of the watcher: the agent lives, the replica stays
        assert alive(replica) and alive(watcher)
        assert psutil.Process(replica).status() == psutil.STATUS_RUNNING  # in the regex
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
        wait_for(
            lambda: not alive(replica) and not alive(watcher),
            10,
            "the replica (GIL held) and its watcher to end",
        )


def test_the_watcher_ends_with_its_replica_and_harms_no_agent() -> None:
    agent, replica, watcher = start_agent("exit")
    try:
        wait_for(lambda: not alive(replica), 10, "the replica to exit")
        wait_for(lambda: not alive(watcher), 3, "its watcher to follow at once")
        assert agent.poll() is None  # the agent lives on
    finally:
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()


def test_a_replica_holding_the_gil_ends_after_sigterm_though_no_agent_kills_it() -> None:
    # The agent's SIGTERM reaches the group; the replica's handler cannot run, and the
    # agent never sends its SIGKILL (it is killed itself a moment later, in the chaos
    # soak's case). The watcher outlives the SIGTERM and kills the replica.
    with agent_and_replica("wedge") as (_agent, replica, watcher):
        termed_at = time.monotonic()
        os.killpg(replica, signal.SIGTERM)
        time.sleep(TERM_GRACE / 2)  # half the grace: what must not happen yet
        assert alive(replica) and alive(watcher)
        wait_for(
            lambda: not alive(replica) and not alive(watcher),
            TERM_GRACE + 5,
            "the watcher to kill the replica its SIGTERM did not stop",
        )
        assert time.monotonic() - termed_at >= TERM_GRACE - 0.5


def test_sigterm_then_the_agent_killed_leaves_no_replica() -> None:
    with agent_and_replica("wedge") as (agent, replica, watcher):
        os.killpg(replica, signal.SIGTERM)
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
        wait_for(
            lambda: not alive(replica) and not alive(watcher),
            5,
            "the replica whose agent died after its SIGTERM to end",
        )


# A warm `python` command's watcher (workers/replica/pool_entry.py starts it so): the
# guard's rules. SIGTERM while the agent lives is the program's to answer (the agent sends
# SIGKILL after its own grace); the agent gone, SIGTERM to the group first, then SIGKILL
# GONE_GRACE later if the program still runs. This program notes each SIGTERM and goes on.
COMMAND = textwrap.dedent("""
    import os, signal, sys, time
    from workers.replica import parent_watch
    watcher = parent_watch.start(term_grace=None, gone_grace=float(sys.argv[2]))
    def noted(_signum, _frame):
        with open(sys.argv[1], "a") as handle:
            handle.write("TERM\\n")
    signal.signal(signal.SIGTERM, noted)
    print(watcher, flush=True)
    while True:
        time.sleep(0.1)
""")
GONE_GRACE = 3.0


def test_a_commands_watcher_leaves_sigterm_to_it_and_ends_it_as_the_guard_once_the_agent_goes(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "notes"
    with agent_and_replica(str(notes), COMMAND, GONE_GRACE) as (agent, replica, watcher):
        os.killpg(replica, signal.SIGTERM)
        wait_for(lambda: notes.is_file() and notes.read_text() == "TERM\n", 10, "its SIGTERM")
        time.sleep(GONE_GRACE + 1.5)  # past every grace: while the agent lives, no kill
        assert alive(replica) and alive(watcher)
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
        gone_at = time.monotonic()
        wait_for(lambda: notes.read_text() == "TERM\nTERM\n", 10, "SIGTERM once its agent went")
        wait_for(
            lambda: not alive(replica) and not alive(watcher),
            GONE_GRACE + 10,
            "SIGKILL after the grace",
        )
        assert time.monotonic() - gone_at >= GONE_GRACE - 0.5
