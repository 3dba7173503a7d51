"""A warm replica: `python -m workers.replica.pool_entry CHANNEL_FD`, started by its
node's agent before any job is known (workers/node/pool.py), in an agent-only directory
(sys.path[0] until the hand-off; not -P, so that a `python` command it runs sees the flags
a fresh interpreter has).

A fresh interpreter of its own (never a fork of one that loaded TensorFlow): it imports
TensorFlow, tf_keras, the runner and the built-in trainers (yielding the CPU at first:
workers/process_priority.py),
says READY on the channel only its agent holds the other end of, and waits. The hand-off
(workers/handoff.py) carries what a cold spawn gives Popen: the replica's whole
environment, its working directory, its log descriptor and, under an agent as root, the
job's uid and gid. The process becomes that replica — log on stdout and stderr, normal
priority, no supplementary groups, the job's gid and uid, its umask, the job's directory,
the environment replaced — before it reads any file of the job or runs any of its code,
then runs the runner's `main()` like `python -P -m workers.replica.runner` — or, for a
`command` job's `python train.py` / `python -m pkg.train`, that program as the fresh
interpreter would (workers/replica/warm_program.py) — and exits with its code: one warm
process serves one replica, so nothing of one job reaches the next.

Nothing here may start TensorFlow's runtime or list its devices before the hand-off:
CUDA_VISIBLE_DEVICES and the CPU split (distribution.configure_devices) only take effect
if neither has happened. Importing TensorFlow does neither; `devices_untouched` checks it
before READY and again at the hand-off, and the process refuses to serve otherwise.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import socket
import sys
import tempfile
import time

from workers import handoff, private_tmp
from workers.process_priority import WARM_NICE, set_priority
from workers.replica import parent_watch

_PR_SET_DUMPABLE = 4

EXIT_CANNOT_SERVE = 70  # sysexits' EX_SOFTWARE: the agent starts the replica cold instead


def warm_up() -> None:
    """Import what every `trainer` replica imports, then the node's preload
    (handoff.PRELOAD_VARIABLE), touching no device."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow  # noqa: F401
    import tf_keras  # noqa: F401

    import workers.replica.runner  # noqa: F401
    from services.jobs.trainers import BUILTIN_TRAINERS

    for entrypoint in BUILTIN_TRAINERS.values():
        importlib.import_module(entrypoint.split(":", 1)[0])
    for name in filter(None, os.environ.get(handoff.PRELOAD_VARIABLE, "").split(",")):
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a job importing it meets the error itself
            print(f"cohort: not preloaded: {name}: {exc!r}", file=sys.stderr, flush=True)  # noqa: T201


def devices_untouched() -> bool:
    """Whether TensorFlow has neither listed its physical devices nor started its runtime
    (after either, CUDA_VISIBLE_DEVICES and logical device settings no longer apply)."""
    from tensorflow.python.eager import context

    ctx = context.context()
    return (
        getattr(ctx, "_context_handle", None) is None
        and getattr(ctx, "_physical_devices", None) is None
    )


def become(hand_off: handoff.HandOff, log_fd: int) -> None:
    """Turn this process into the replica `hand_off` describes, in the order a cold spawn
    gets it from Popen and exec: output, priority, user, umask, directory, environment.

    Raises:
        OSError: a step failed (the agent starts the replica cold instead).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log_fd, 1)  # closes the warm process's own log, the agent's file
    os.dup2(log_fd, 2)
    os.close(log_fd)
    # While still allowed to (as root: before the uid changes); a second at most for the
    # kernel's limit on unprivileged changes (an agent not run as root).
    set_priority(0, wait=1.0)
    if hand_off.private_tmp is not None:  # started in a namespace of its own for this
        private_tmp.mount_private(hand_off.private_tmp)
    if hand_off.uid is not None and hand_off.gid is not None:
        os.setgroups([])
        os.setresgid(hand_off.gid, hand_off.gid, hand_off.gid)
        os.setresuid(hand_off.uid, hand_off.uid, hand_off.uid)
        # A change of uid marks a process not dumpable: its /proc files would stay root's
        # and its own code could not read /proc/self/io or list /proc/self/fd, which an
        # exec as the job's uid (a cold spawn) allows. It holds nothing of root's.
        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE)")
    os.umask(hand_off.umask)
    os.chdir(hand_off.cwd)
    os.environ.clear()
    os.environ.update(hand_off.env)
    tempfile.tempdir = None  # computed again from the replica's TMPDIR when first needed


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print(  # noqa: T201
            "usage: python -m workers.replica.pool_entry CHANNEL_FD",
            file=sys.stderr,
        )
        return 2
    channel = socket.socket(fileno=int(argv[0]))
    started_in = sys.path[0]  # this process's directory; the job's program gets its own
    agent = int(os.environ[parent_watch.AGENT_PID])  # the hand-off replaces the environment
    set_priority(WARM_NICE)  # its agent raises it back (workers/process_priority.py)
    warm_up()
    if not devices_untouched():
        print(  # noqa: T201
            "cohort: importing TensorFlow initialized its devices: this interpreter "
            "cannot serve as a warm replica",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_CANNOT_SERVE
    print(f"cohort: warm process {os.getpid()} ready", flush=True)  # noqa: T201 - its log
    try:
        channel.sendall(handoff.ready_message(_preloaded()))
        ready_at = time.monotonic()
        hand_off, log_fd = handoff.receive(channel)
    except (EOFError, OSError):
        return 0  # retired by its agent, or the agent is gone: nothing was served
    try:
        if not devices_untouched():
            raise OSError("TensorFlow's devices were initialized while waiting")
        become(hand_off, log_fd)
    except OSError as exc:
        print(  # noqa: T201
            f"cohort: this warm process cannot become the replica: {exc}",
            file=sys.stderr,
            flush=True,
        )
        try:
            channel.sendall(handoff.FAILED + str(exc).encode()[:1000])
        except OSError:
            pass
        return EXIT_CANNOT_SERVE
    try:
        channel.sendall(handoff.STARTED)
    except OSError:
        return 0  # the agent gave up on it (and starts the replica cold): not ours
    channel.close()  # the replica's code gets no line to its agent
    return _serve(hand_off, time.monotonic() - ready_at, started_in, agent)


def _serve(hand_off: handoff.HandOff, waited: float, started_in: str, agent: int) -> int:
    """Run the replica this process has become: Cohort's runner, or the job's `python`
    program; its exit status."""
    from workers.replica import runner
    from workers.replica.callbacks import announce

    announce(
        f"warm replica: process {os.getpid()} was ready {waited:.1f}s before its "
        "hand-off, TensorFlow's devices untouched until then"
    )
    if hand_off.program is None:
        if sys.path and sys.path[0] == started_in:
            del sys.path[0]  # as `-P` gives the cold runner
        return runner.main()
    from workers.replica import warm_program

    # The guard's job on the cold path: the program stops when its agent dies.
    parent_watch.start(term_grace=None, agent=agent, gone_grace=parent_watch.GUARD_GRACE)
    return warm_program.run(hand_off.program, started_in)


def _preloaded() -> list[str]:
    """The top-level names of the modules this process has imported from files (built-in
    ones cannot be shadowed by a job's directory)."""
    names = {name.partition(".")[0] for name in list(sys.modules)}
    return sorted(names - set(sys.builtin_module_names) - {"__main__"})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
