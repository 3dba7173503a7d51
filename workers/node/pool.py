"""An agent's warm replica processes: started before any job, each handed one replica.

Starting Python and importing TensorFlow takes seconds of a replica's launch. The agent
keeps processes that have done so (as many as workers/node/pool_size.py says: by default one
per free slot, within a memory bound) (workers/replica/pool_entry.py), each a fresh
interpreter of its own — never a fork of one that loaded TensorFlow — started as a cold
replica is (its own session, umask 077, COHORT_NODE_ID and COHORT_AGENT_PID in the
environment it is exec'd with), as the agent's user, with an agent-only directory as HOME
and TMPDIR. A `trainer` replica, or a `command` that is `python SCRIPT` or `python -m
MODULE` (workers/python_args.py), whose job's `env` sets nothing TensorFlow reads at import
(environment.warm_servable) is handed to a ready one: the agent sends what it would give
Popen (the environment, the directory, the log descriptor, the job's uid and gid) over a
socket pair only it and that process hold (workers/handoff.py); the process applies it all
before it reads anything of the job, says so, and from then on is that replica: the agent
wraps its Popen in a ReplicaProcess, and stops, fences, reaps and reports it as any other.
It serves that replica and exits. With no warm process ready, the replica starts cold at
once; nothing ever waits for one. A job with requirements always starts cold: the warm
processes run the node's interpreter, its replicas their environment's
(workers/node/envs.py), and a pool per environment would keep ~250 MiB processes for
environments few jobs share.

A keeper thread starts a replacement as soon as one is taken (if the size still calls for
it: none while every slot is busy), and replaces any that dies waiting. Warm processes that
fail (die before or while waiting, refuse a hand-off) MAX_FAILURES times in a row, with no
hand-off succeeding in between, turn the pool off: replicas start cold, and the agent's log
says why — never a loop of doomed starts. A warm process exits when its channel closes: when
the agent retires it (shutdown) or dies (the kernel closes the agent's end).
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from workers import handoff, layout, private_tmp
from workers.node import isolation
from workers.node.environment import warm_env
from workers.node.launcher import tail
from workers.node.pool_size import PoolSize
from workers.node.processes import stop_process_group
from workers.process_priority import WARM_YIELD_SECONDS, set_priority

log = logging.getLogger("cohort.pool")

MAX_FAILURES = 3
# How long a hand-off may take (a few syscalls in the warm process): past it the agent
# kills that process and starts the replica cold.
HAND_OFF_TIMEOUT = 10.0
# How often the keeper looks for waiting processes that died, or that have yielded long
# enough.
_KEEPER_TICK = 1.0


@dataclass
class WarmProcess:
    """A warm process, from its start until it is handed a replica (or dies)."""

    popen: subprocess.Popen[bytes]
    channel: socket.socket  # the agent's end
    started_at: float
    ready: bool = False
    raised: bool = False  # back at normal priority (workers/process_priority.py)
    # The top-level modules it has imported, as it said when ready (workers/python_args.py
    # keeps a command whose directory would shadow one of them from it).
    preloaded: frozenset[str] = frozenset()

    @property
    def pid(self) -> int:
        return self.popen.pid


class ReplicaPool:
    """Warm processes of `python` (as many as `size` says: workers/node/pool_size.py),
    kept by a thread once `start`ed."""

    def __init__(
        self,
        size: PoolSize | int,
        python: str,
        node_id: str,
        data_dir: Path,
        private_tmp: bool = False,
        preload: Sequence[str] = (),
    ) -> None:
        self.size = size if isinstance(size, PoolSize) else PoolSize(size)
        self.preload = tuple(preload)  # imported after TensorFlow (REPLICA_POOL_PRELOAD)
        # Each warm process in a mount namespace of its own, to mount the replica's own
        # /tmp and /dev/shm in at its hand-off (workers/private_tmp.py).
        self.private_tmp = private_tmp
        self.python = python
        self.node_id = node_id
        self.data_dir = data_dir
        self.dirs = layout.pool_dirs(data_dir)
        self._waiting: list[WarmProcess] = []  # started, not yet handed a replica
        self._failures = 0
        self.started = 0  # warm processes started so far
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._wake_read: socket.socket | None = None  # the keeper's, once started
        self._wake_write: socket.socket | None = None
        self._keeper: threading.Thread | None = None

    @property
    def off(self) -> bool:
        """Size 0, or turned off after MAX_FAILURES failures in a row."""
        return self.size.off or self._failures >= MAX_FAILURES

    def start(self) -> None:
        """Start the keeper, which starts the warm processes (none when the size is 0)."""
        if self.size.off or self._keeper is not None:
            return
        isolation.lay_out_pool(self.dirs)
        self._wake_read, self._wake_write = socket.socketpair()
        self._keeper = threading.Thread(
            target=self._keep, args=(self._wake_read,), daemon=True, name="replica-pool"
        )
        self._keeper.start()
        log.info("keeping warm replica processes: %s", self.size.describe())

    def waiting_pids(self) -> list[int]:
        """The pids of the warm processes not handed a replica yet (started or ready)."""
        with self._lock:
            return [warm.pid for warm in self._waiting]

    def ready_pids(self) -> list[int]:
        """The pids of the warm processes ready for a hand-off."""
        with self._lock:
            return [warm.pid for warm in self._waiting if warm.ready]

    # -- the agent's side of a hand-off ---------------------------------------
    def take(self, unless: Callable[[frozenset[str]], bool] | None = None) -> WarmProcess | None:
        """A ready warm process, now the caller's to hand off; None at once if none is
        (or `unless` its preloaded modules rule out every one)."""
        with self._lock:
            for warm in list(self._waiting):
                if not warm.ready or (unless is not None and unless(warm.preloaded)):
                    continue
                self._waiting.remove(warm)
                if warm.popen.poll() is None:
                    self._wake()  # its replacement starts now
                    return warm
                self._failed(warm, f"exited with {warm.popen.returncode} while waiting")
        return None

    def hand_off(
        self, warm: WarmProcess, message: handoff.HandOff, log_fd: int
    ) -> subprocess.Popen[bytes] | None:
        """Hand `warm` its replica; its Popen once it says it is that replica, or None
        (it is killed, and the caller starts the replica cold)."""
        answer, why = b"", "it closed the channel"
        try:
            warm.channel.settimeout(HAND_OFF_TIMEOUT)
            handoff.send(warm.channel, message, log_fd)
            answer = warm.channel.recv(1024)
        except OSError as exc:
            why = str(exc) or type(exc).__name__
        warm.channel.close()
        if answer == handoff.STARTED:
            with self._lock:
                self._failures = 0
            return warm.popen
        if answer.startswith(handoff.FAILED):
            why = answer[1:].decode(errors="replace")
        _kill(warm.popen)
        with self._lock:
            self._failed(warm, f"refused its hand-off: {why}")
        return None

    def shutdown(self) -> None:
        """Stop the keeper and every warm process still waiting."""
        self._stopping.set()
        self._wake()
        if self._keeper is not None:
            self._keeper.join(timeout=10)
            if not self._keeper.is_alive():
                for end in (self._wake_read, self._wake_write):
                    if end is not None:
                        end.close()
        with self._lock:
            waiting, self._waiting = self._waiting, []
        for warm in waiting:
            warm.channel.close()  # a ready one exits on the closed channel...
            stop_process_group(warm.popen, 2.0)  # ...one still importing on SIGTERM

    # -- the keeper ------------------------------------------------------------
    def _wake(self) -> None:
        if self._wake_write is None:
            return  # no keeper
        try:
            self._wake_write.send(b"w")
        except OSError:
            pass  # its buffer is full, or the keeper is gone: nothing to wake

    def _keep(self, wake: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        selector.register(wake, selectors.EVENT_READ)
        while not self._stopping.is_set():
            # Outside the pool's lock: the free slots are read under the agent's, which
            # a spawn holds while it takes a warm process (under the pool's).
            target = self.size.target()
            with self._lock:
                self._reap()
                # Never more processes warming up than failures the pool may still
                # afford: a broken interpreter costs MAX_FAILURES starts, not more.
                warming = sum(1 for warm in self._waiting if not warm.ready)
                missing = (
                    0
                    if self.off
                    else min(
                        target - len(self._waiting),
                        MAX_FAILURES - self._failures - warming,
                    )
                )
            for _ in range(missing):
                warm = self._start()
                if warm is not None:
                    selector.register(warm.channel, selectors.EVENT_READ, warm)
            for key, _events in selector.select(timeout=_KEEPER_TICK):
                if key.fileobj is wake:
                    wake.recv(4096)
                    continue
                selector.unregister(key.fileobj)
                self._answered(key.data)
            self._raise_yielded()
        selector.close()

    def _raise_yielded(self) -> None:
        """Normal priority for the waiting processes that have yielded WARM_YIELD_SECONDS:
        raised from here, as no thread of theirs could be sure to run."""
        due = time.monotonic() - WARM_YIELD_SECONDS
        with self._lock:
            for warm in self._waiting:
                if not warm.raised and warm.started_at <= due:
                    warm.raised = set_priority(0, warm.pid)

    def _start(self) -> WarmProcess | None:
        """Start one warm process (it says READY on its channel once it has warmed up)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            log_fd = os.open(
                self.dirs.log_file,
                os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                0o600,
            )
            with open(log_fd, "ab") as log_file:
                argv = [self.python, "-m", "workers.replica.pool_entry", str(theirs.fileno())]
                if self.private_tmp:
                    argv = private_tmp.namespace_only_argv(self.python, argv)
                popen = subprocess.Popen(  # noqa: S603 - an argv, never a shell
                    argv,
                    env=warm_env(
                        self.node_id, self.data_dir, self.dirs.home, self.dirs.tmp, self.preload
                    ),
                    cwd=self.dirs.root,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    pass_fds=(theirs.fileno(),),
                    start_new_session=True,
                    **isolation.popen_options(None),
                )
        except OSError as exc:
            ours.close()
            with self._lock:
                self.started += 1
                self._failures += 1
                self._say_if_off(f"cannot start a warm process: {exc}")
            return None
        finally:
            theirs.close()
        warm = WarmProcess(popen, ours, time.monotonic())
        with self._lock:
            self._waiting.append(warm)
            self.started += 1
        return warm

    def _answered(self, warm: WarmProcess) -> None:
        """`warm`'s first word: READY, or its channel closed (it died warming up)."""
        preloaded: frozenset[str] | None = None
        try:
            if warm.channel.recv(1) == handoff.READY:
                warm.channel.settimeout(HAND_OFF_TIMEOUT)  # the rest comes with the word
                preloaded = handoff.receive_preloaded(warm.channel)
        except OSError:
            pass
        with self._lock:
            if warm not in self._waiting:
                return  # shut down meanwhile
            if preloaded is not None:
                warm.ready, warm.preloaded = True, preloaded
                self.size.measure(warm.pid)
                log.debug(
                    "warm process %d ready after %.1fs",
                    warm.pid,
                    time.monotonic() - warm.started_at,
                )
                return
            self._waiting.remove(warm)
        _kill(warm.popen)
        with self._lock:
            self._failed(warm, f"exited with {warm.popen.returncode} while warming up")

    def _reap(self) -> None:
        """Drop ready processes that died waiting (lock held)."""
        for warm in [w for w in self._waiting if w.ready and w.popen.poll() is not None]:
            self._waiting.remove(warm)
            warm.channel.close()
            self._failed(warm, f"exited with {warm.popen.returncode} while waiting")

    def _failed(self, warm: WarmProcess, why: str) -> None:
        """Count a warm process that served nothing (lock held)."""
        warm.channel.close()
        self._failures += 1
        log.warning("warm replica process %d %s", warm.pid, why)
        self._say_if_off(why)

    def _say_if_off(self, why: str) -> None:
        if self._failures == MAX_FAILURES:
            log.error(
                "replica pool off after %d warm processes failed in a row (last: "
                "%s); replicas start cold. Output of the warm processes: %s\n%s",
                MAX_FAILURES,
                why,
                self.dirs.log_file,
                tail(self.dirs.log_file, 2000),
            )


def _kill(popen: subprocess.Popen[bytes]) -> None:
    """SIGKILL a warm process's group and reap it."""
    try:
        os.killpg(popen.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    popen.wait()
