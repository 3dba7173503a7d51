"""The faults a soak injects, and putting each right again after a random while.

Every fault is one of FAULT_KINDS. A replica fault picks a live replica process (from
tests/chaos/processes.py); a component fault picks a part of the stack that is up. What a
fault took down comes back after a random delay drawn from the soak's seeded generator:
a killed agent or scheduler is started again as a supervisor would (some agents within
the node timeout, some past it), a frozen replica is sent SIGCONT (some before the
progress timeout, some after), Redis comes back empty, PostgreSQL starts again.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from cli.stack import Stack
from tests.chaos.processes import ProcessWatch, ReplicaSeen, process_stat
from tests.pgserver import PostgresServer

REPLICA_KILL = "replica SIGKILL"
REPLICA_STOP = "replica SIGSTOP then SIGCONT"
AGENT_KILL = "agent SIGKILL and restart"
API_KILL = "api SIGKILL and restart"
SCHEDULER_KILL = "scheduler SIGKILL and restart"
REDIS_RESTART = "Redis restart (empty)"
POSTGRES_RESTART = "PostgreSQL restart"
FAULT_KINDS = (
    REPLICA_KILL,
    REPLICA_STOP,
    AGENT_KILL,
    API_KILL,
    SCHEDULER_KILL,
    REDIS_RESTART,
    POSTGRES_RESTART,
)
REPLICA_KINDS = frozenset({REPLICA_KILL, REPLICA_STOP})  # need a live replica

# How long each fault lasts before it is put right (seconds, uniform). With the soak's
# settings (tests/faults/conftest.py FAST): node lost after 6 s, no progress for 20 s is
# a hang (a frozen TensorFlow replica's peers give up after about 15 s of their own), the
# scheduler's lock expires after 10 s.
FROZEN_S = (1.0, 25.0)
AGENT_DOWN_S = (0.5, 12.0)
API_DOWN_S = (0.2, 4.0)
SCHEDULER_DOWN_S = (0.2, 5.0)
REDIS_DOWN_S = (0.0, 2.0)
POSTGRES_DOWN_S = (0.5, 6.0)


@dataclass
class Restore:
    due: float
    what: str  # the part it brings back ("agent-node-a", "redis", a pid...)
    action: Callable[[], None]


def _start_ticks(pid: int) -> str | None:
    """A process's start time (clock ticks after boot); None once it is gone."""
    stat = process_stat(pid)
    return stat[1] if stat else None


class Injector:
    """Injects faults into one soak's stack and restores what they took down."""

    def __init__(
        self,
        stack: Stack,
        postgres: PostgresServer,
        watch: ProcessWatch,
        rng: random.Random,
        agents: list[str],
        log: Callable[[str], None],
    ) -> None:
        self.stack = stack
        self.postgres = postgres
        self.watch = watch
        self.rng = rng
        self.agents = agents
        self.log = log
        self.counts: Counter[str] = Counter()
        self.exited: Counter[str] = Counter()  # parts that exited with no fault injected
        self.pending: list[Restore] = []
        self.down: set[str] = set()  # parts of the stack down, replica pids frozen

    # -- injecting -------------------------------------------------------------
    def inject(self, kind: str) -> bool:
        """Inject one fault of `kind`; False when nothing can take it now (no live
        replica, the part already down)."""
        done = {
            REPLICA_KILL: self._replica_kill,
            REPLICA_STOP: self._replica_stop,
            AGENT_KILL: self._agent_kill,
            API_KILL: lambda: self._component("api"),
            SCHEDULER_KILL: lambda: self._component("scheduler"),
            REDIS_RESTART: self._redis,
            POSTGRES_RESTART: self._postgres,
        }[kind]()
        if done:
            self.counts[kind] += 1
        return done

    def _victim(self) -> ReplicaSeen | None:
        live = [
            r
            for r in self.watch.live()
            if r.leader and not r.stopped and f"pid:{r.pid}" not in self.down
        ]
        return self.rng.choice(sorted(live, key=lambda r: r.pid)) if live else None

    def _replica_kill(self) -> bool:
        victim = self._victim()
        if victim is None:
            return False
        try:
            os.kill(victim.pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.log(
            f"SIGKILL replica {victim.index} of job {victim.job_id} attempt "
            f"{victim.attempt} on {victim.node_id} (pid {victim.pid})"
        )
        return True

    def _replica_stop(self) -> bool:
        victim = self._victim()
        if victim is None:
            return False
        ticks = _start_ticks(victim.pid)
        try:
            os.kill(victim.pid, signal.SIGSTOP)
        except ProcessLookupError:
            return False
        frozen = self.rng.uniform(*FROZEN_S)
        name = f"pid:{victim.pid}"
        self.down.add(name)

        def thaw() -> None:
            if ticks is not None and _start_ticks(victim.pid) == ticks:  # not a reused pid
                try:
                    os.kill(victim.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass

        self._later(frozen, name, thaw)
        self.log(
            f"SIGSTOP replica {victim.index} of job {victim.job_id} attempt "
            f"{victim.attempt} on {victim.node_id} (pid {victim.pid}) for {frozen:.1f}s"
        )
        return True

    def _agent_kill(self) -> bool:
        up = [node for node in self.agents if f"agent-{node}" not in self.down]
        if not up:
            return False
        node = self.rng.choice(up)
        return self._component(f"agent-{node}", AGENT_DOWN_S)

    def _component(self, name: str, down: tuple[float, float] | None = None) -> bool:
        if name in self.down:
            return False
        seconds = self.rng.uniform(*(down or (API_DOWN_S if name == "api" else SCHEDULER_DOWN_S)))
        self.stack.kill(name)  # SIGKILL to its process group, reaped
        self.down.add(name)
        self._later(seconds, name, lambda: self._start(name))
        self.log(f"SIGKILL {name}, back in {seconds:.1f}s")
        return True

    def _start(self, name: str) -> None:
        self.stack.restart(name)

    def _redis(self) -> bool:
        if "redis" in self.down:
            return False
        seconds = self.rng.uniform(*REDIS_DOWN_S)
        self.stack.kill("redis")
        self.down.add("redis")
        self._later(seconds, "redis", self._start_redis)
        self.log(f"Redis killed, back empty in {seconds:.1f}s")
        return True

    def _start_redis(self) -> None:
        self.stack.restart_redis()

    def _postgres(self) -> bool:
        if "postgres" in self.down:
            return False
        seconds = self.rng.uniform(*POSTGRES_DOWN_S)
        self.postgres.stop("fast")  # ends every session, as a restart or failover does
        self.down.add("postgres")
        self._later(seconds, "postgres", self.postgres.start)
        self.log(f"PostgreSQL stopped, back in {seconds:.1f}s")
        return True

    def revive_exited(self) -> None:
        """Start again, as a supervisor would, any part of the stack that exited by itself
        (no fault of ours took it down); counted, for the soak to report."""
        for name, process in list(self.stack.children):
            if process.poll() is None or name in self.down:
                continue
            self.stack.children.remove((name, process))
            self.exited[name] += 1
            self.log(
                f"{name} exited by itself (code {process.returncode}); started again. "
                f"Its log ends: {self._log_tail(name)}"
            )
            if name == "redis":
                self._start_redis()
            else:
                self._start(name)

    def _log_tail(self, name: str, lines: int = 3) -> str:
        try:
            text = (self.stack.log_dir / f"{name}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])

    # -- restoring -------------------------------------------------------------
    def _later(self, seconds: float, what: str, action: Callable[[], None]) -> None:
        self.pending.append(Restore(time.monotonic() + seconds, what, action))

    def restore_due(self) -> None:
        """Put right every fault whose time has come."""
        now = time.monotonic()
        for restore in [r for r in self.pending if r.due <= now]:
            self._restore(restore)

    def restore_all(self) -> None:
        """Put right every fault still in force (the end of the soak), the database and
        Redis first."""
        order = {"postgres": 0, "redis": 1, "scheduler": 2, "api": 3}
        for restore in sorted(self.pending, key=lambda r: order.get(r.what, 4)):
            self._restore(restore)

    def _restore(self, restore: Restore) -> None:
        self.pending.remove(restore)
        restore.action()
        self.down.discard(restore.what)
