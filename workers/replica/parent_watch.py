"""A replica ends when the agent that started it dies.

The replica runs in a session of its own, so it outlives a killed agent; left alone it
would keep training (or waiting for its gang) next to the gang the scheduler places
again elsewhere, holding its port and its CPU. Nothing it does from then on reaches the
control plane either: its agent, which ships its metrics file and log, is gone.

The watcher is a process of its own, forked by the runner before anything else starts,
not a thread: TensorFlow holds the GIL through some long waits — joining a gang
(TFE_EnableCollectiveOps waits for every peer in the coordination service, for as long
as an hour) — where no other thread of the replica runs, and a replica whose agent and
peers are gone waits there for good (the chaos soak, tests/chaos, found one). Once a
second the watcher looks at the replica's parent; when it is no longer the agent, it
SIGKILLs the replica's process group, the watcher included (nothing the replica could
still write would be shipped). It exits the moment the replica does: it waits on a pipe
whose only writer is the replica (close-on-exec, so no program the replica runs holds
it), which reads as closed once the replica is gone. Standard library and os calls
only: it runs in a fork of a process that may hold TensorFlow's threads.

The watcher is also what makes SIGTERM final. The agent stops a replica with SIGTERM to
its process group and SIGKILL after a grace period; the runner's handler and its
watchdog thread need the GIL, which a replica joining its gang may never give back. An
agent killed between the two signals left such a replica running for good, and the
watcher gone with the SIGTERM (the chaos soak found two of one job). So the watcher
outlives SIGTERM: `term_grace` seconds after it, a replica still running has its group
SIGKILLed, agent or none.

A warm process running a job's `python` command (workers/replica/pool_entry.py) forks the
same watcher with the guard's rules instead (workers/node/guard.py, the cold path's):
SIGTERM while the agent lives is the program's to answer, and once the agent is gone the
group gets SIGTERM first (a program may save) and SIGKILL GUARD_GRACE seconds later.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

POLL_SECONDS = 1.0
AGENT_PID = "COHORT_AGENT_PID"
# A warm `python` command's SIGTERM-to-SIGKILL grace once its agent is gone: the guard's on
# the cold path (workers/node/guard.py GRACE_SECONDS, which imports nothing of Cohort's).
GUARD_GRACE = 10.0
_HELD = {signal.SIGTERM, signal.SIGUSR1}


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command's name (state first, then the
    parent pid, the process group...; proc(5) numbers them from 3); None once it is gone.
    The name is skipped by its last ')': it may hold spaces and parentheses itself."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode(errors="replace")
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def parent_of(pid: int) -> int | None:
    """The parent pid of `pid`; None once it is gone."""
    fields = stat_fields(pid)
    return int(fields[1]) if fields and len(fields) > 1 else None


def _say(text: str) -> None:
    try:
        sys.stderr.write(f"cohort: warning: {text}\n")
        sys.stderr.flush()
    except OSError:  # the log is on a full disk: the replica still goes
        pass


def watch(
    agent: int,
    replica: int,
    ended: int,
    term_grace: float | None,
    poll: float = POLL_SECONDS,
    gone_grace: float | None = None,
    unblock: set[int | signal.Signals] | None = None,
) -> None:
    """The watcher's loop (in the forked process): returns when the replica ended (`ended`
    reads as closed); ends the replica's process group (and so itself) when the agent is
    gone — at once, or (`gone_grace`) with SIGTERM first and SIGKILL that long after —
    and `term_grace` seconds after a SIGTERM if the replica is still running (None: only
    the agent's own SIGKILL ends it then)."""
    termed: list[float] = []  # when SIGTERM came (the agent signals the whole group)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: termed.append(time.monotonic()))
    # "Checkpoint now" is the replica's to answer; signalled with its group, the
    # watcher must not die of it.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if unblock is not None:  # the mask `start` held across the fork, handlers now set
        signal.pthread_sigmask(signal.SIG_SETMASK, unblock)
    gone_at: float | None = None
    while True:
        deadlines = [termed[0] + term_grace] if termed and term_grace is not None else []
        if gone_at is not None and gone_grace is not None:
            deadlines.append(gone_at + gone_grace)
        wait = max(0.0, min([poll, *(d - time.monotonic() for d in deadlines)]))
        if select.select([ended], [], [], wait)[0]:
            return  # the replica is gone
        parent = parent_of(replica)
        if parent is None or os.getppid() != replica:
            return  # the replica is gone
        now = time.monotonic()
        if parent != agent and gone_grace is not None:
            if gone_at is None:
                _say(f"agent {agent} is gone; stopping")
                gone_at = now
                os.killpg(os.getpgid(replica), signal.SIGTERM)
                continue
            if now < gone_at + gone_grace:
                continue
            _say(f"still running {gone_grace:.0f}s after its agent went; killing")
        elif parent != agent:
            _say(f"agent {agent} is gone; stopping")
        elif term_grace is not None and termed and now >= termed[0] + term_grace:
            _say(f"still running {term_grace:.0f}s after SIGTERM; killing")
        else:
            continue
        os.killpg(os.getpgid(replica), signal.SIGKILL)
        return


def start(
    term_grace: float | None, agent: int | None = None, gone_grace: float | None = None
) -> int | None:
    """Fork the watcher of this replica if an agent started it (`agent`, else
    $COHORT_AGENT_PID); returns the watcher's pid (None: started by hand, nothing to
    watch). `term_grace`: how long after SIGTERM a replica still running is killed
    (longer than the runner's own grace, which flushes what it can when it gets to run);
    `gone_grace`: see `watch`."""
    if agent is None:
        given = os.environ.get(AGENT_PID, "")
        if not given.isdigit():
            return None
        agent = int(given)
    replica = os.getpid()
    ended, alive = os.pipe()  # both close-on-exec (Python's default)
    # Held across the fork: a SIGTERM to the group just after it (an agent stopping a
    # replica that has only begun) would otherwise find the watcher with the replica's
    # handlers of that moment, the default ones, and end it before it sets its own.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    pid = os.fork()
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        os.close(ended)
        return pid  # `alive` stays open as long as the replica lives
    # The watcher: never returns into the runner.
    try:
        os.close(alive)
        watch(agent, replica, ended, term_grace, gone_grace=gone_grace, unblock=held)
    finally:
        os._exit(0)
