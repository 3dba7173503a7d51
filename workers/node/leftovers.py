"""Processes this node's agents left running, found by the marks every replica carries.

Every replica process, and whatever it forks, has its agent's marks in the environment it
was exec'd with (environment.agent_marks: the node's id and the agent's DATA_DIR), which
/proc/<pid>/environ keeps whatever the process does to os.environ later. Two moments
need them:

* a job's last replica here ended: what its code left running under its uid goes
  (isolation.reap);
* the agent starts: whatever a previous agent of this node left goes before this one
  beats or takes a start (`end_predecessors`). A killed agent's replicas stop themselves
  (their parent watch, or the guard of a job's command), but not at once: a frozen one
  holds the guard's SIGTERM until its SIGKILL ten seconds later, and meanwhile the
  scheduler, told by the new agent that nothing runs here, places the gang again (the
  chaos soak saw two attempts of one job alive together for 1.8 s).

A process that empties its own environment escapes both (docs/security.md).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from workers.node.environment import agent_marks

log = logging.getLogger("cohort.agent")

_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


def marked(node_id: str, data_dir: Path, uid: int | None = None) -> Iterator[psutil.Process]:
    """The processes carrying this agent's marks (running as `uid`, if given), never
    this process itself. Not another agent's: one on the same host under the same node
    id (test stacks, CI runs side by side) has a DATA_DIR of its own."""
    marks = agent_marks(node_id, data_dir)
    me = os.getpid()
    for process in psutil.process_iter(["uids"]):
        if process.pid == me:
            continue
        uids = process.info.get("uids")
        if uid is not None and (uids is None or uid not in (uids.real, uids.effective)):
            continue
        try:
            environ = process.environ()
        except _GONE:
            continue
        if all(environ.get(name) == value for name, value in marks.items()):
            yield process


def kill(processes: list[psutil.Process]) -> list[psutil.Process]:
    """SIGKILL each (a stopped process too: SIGKILL needs no SIGCONT); those signalled."""
    killed = []
    for process in processes:
        try:
            process.send_signal(signal.SIGKILL)
            killed.append(process)
        except _GONE:
            continue
    return killed


def _running(process: psutil.Process) -> bool:
    """Not gone, nor a zombie: a killed orphan is one until its new parent (init, or the
    container's) reaps it, and holds nothing then (psutil.wait_procs would wait it out)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def end_predecessors(node_id: str, data_dir: Path, timeout: float = 10.0) -> int:
    """SIGKILL every process a previous agent of this node (same id, same DATA_DIR) left
    running, and wait up to `timeout` seconds for them to be gone; returns how many.
    Called before the agent has started anything, so every marked process is another's."""
    killed = kill(list(marked(node_id, data_dir)))
    if not killed:
        return 0
    alive = killed
    deadline = time.monotonic() + timeout
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [process for process in alive if _running(process)]
    log.warning(
        "ended %d processes a previous agent of node %s left running%s",
        len(killed),
        node_id,
        f" ({len(alive)} still there after {timeout:.0f}s: pids "
        f"{', '.join(str(p.pid) for p in alive)})"
        if alive
        else "",
    )
    return len(killed)
