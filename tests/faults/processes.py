"""The processes of a job's attempt, found by what marks them, and a replica's training
thread held still."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import sqlalchemy as sa

from cli.stack import Stack
from services.models.jobs import Replica
from tests.faults.nothing_lost import agent_data_dirs
from workers.node.environment import agent_marks


def attempt_processes(stack: Stack, job_id: int, attempt: int) -> list[psutil.Process]:
    """Every live process an agent of `stack` started for attempt `attempt` of job
    `job_id`, and whatever those started: their environment at exec carries the agent's
    marks, its node and DATA_DIR (workers/node/environment.py), which tell them from
    another stack's on this host, and the job and the attempt. A warm process
    (workers/node/pool.py) gets its job at hand-off, after its exec: it and what it starts
    are known by their session instead, which the replica leads (its pid in SQL)."""
    marks = [agent_marks(node, data_dir) for node, data_dir in agent_data_dirs(stack).items()]
    wanted = {"COHORT_JOB_ID": str(job_id), "COHORT_ATTEMPT": str(attempt)}
    leaders = _replica_pids(stack, job_id, attempt)
    found = []
    for process in psutil.process_iter():
        try:
            environ = process.environ()
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            ours = any(all(environ.get(k) == v for k, v in m.items()) for m in marks)
            if ours and (
                all(environ.get(k) == v for k, v in wanted.items())
                or os.getsid(process.pid) in leaders
            ):
                found.append(process)
        except (psutil.Error, ProcessLookupError):
            continue  # gone meanwhile, or a kernel thread
    return found


def _replica_pids(stack: Stack, job_id: int, attempt: int) -> set[int]:
    """The pids the agents reported for the attempt's replicas."""
    engine = sa.create_engine(stack.settings.database_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                sa.select(Replica.pid).where(Replica.job_id == job_id, Replica.attempt == attempt)
            )
            return {pid for (pid,) in rows if pid is not None}
    finally:
        engine.dispose()


_PTRACE_SEIZE, _PTRACE_INTERRUPT = 0x4206, 0x4207
_WALL = 0x40000000  # waitpid: every child, threads and traced ones too


def _ptrace(request: int, pid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    libc.ptrace.restype = ctypes.c_long
    if libc.ptrace(request, pid, None, None) == -1:
        errno = ctypes.get_errno()
        raise OSError(errno, f"ptrace({request:#x}, {pid}): {os.strerror(errno)}")


@contextmanager
def main_thread_stopped(pid: int) -> Iterator[None]:
    """Hold process `pid`'s main thread (where Cohort's runner trains) in a ptrace stop
    while every other thread of it runs on: a replica hung in its own code, as a
    deadlock or a stuck input pipeline leaves it. SIGTERM is not handled (Python runs
    handlers in the main thread), so it takes the agent's SIGKILL; killed, its exit is
    reported here first, and a thread reaps it here so that the agent, its parent,
    sees it. On leaving, a process still there is SIGKILLed."""
    _ptrace(_PTRACE_SEIZE, pid)  # the thread group leader is the main thread
    _ptrace(_PTRACE_INTERRUPT, pid)

    def reap() -> None:
        while True:  # stops (the interrupt, a signal held) leave it stopped
            try:
                _pid, status = os.waitpid(pid, _WALL)
            except ChildProcessError:
                return
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                return

    reaper = threading.Thread(target=reap, daemon=True, name=f"reap-{pid}")
    reaper.start()
    try:
        yield
    finally:
        if reaper.is_alive():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            reaper.join(10)
