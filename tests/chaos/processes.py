"""The replica processes of a soak's stack, sampled from /proc every `interval` seconds.

Why sampling and not SQL's rows: a replica row's `finished_at` is when Cohort settled it,
which for a replica declared hung or lost is when it was declared, not when its process
died (a frozen process lives on until its agent's SIGKILL, an orphan until it notices its
agent is gone), and `started_at` is the agent's report of the spawn. Two attempts of one
job "alive at once" is a fact about processes, so it is read from the processes.

A replica process is known by its environment at exec (/proc/<pid>/environ, which a
later change of os.environ does not alter; workers/node/environment.py): the agent's
marks (COHORT_NODE_DATA_DIR under the soak's directory, COHORT_NODE_ID) and its
COHORT_JOB_ID, COHORT_ATTEMPT and COHORT_REPLICA_INDEX. Children a replica forks inherit
the same environment and count as the replica's.

A warm process (a soak with the agents' replica pool on: workers/node/pool.py) is exec'd
before its job is known, with the marks but no job: it is read again every sample, and
known as a replica once SQL names its pid as one (`handed`, the agents' reports of the
processes they handed a replica to). Until then it is *warm*: none of a job's, yet a
process of the stack's, which must not outlive the stack either (`warm_live`).

A zombie is dead (it only waits to be reaped); a stopped process (SIGSTOP) is alive.
Each (pid, start time) is read once; a process without the marks is read again until it
is 2 s old (the moment between an agent's fork and the replica's exec shows the agent's
own environment).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from workers.replica.parent_watch import stat_fields

UNMARKED_RECHECK_S = 2.0
HANDED_REFRESH_S = 0.5  # how stale the pid -> replica map may be while a warm one waits

# pid -> (job id, attempt, replica index, node id) of the replicas SQL knows the pid of.
Handed = Callable[[], dict[int, tuple[int, int, int, str]]]


@dataclass
class ReplicaSeen:
    """One replica process: who it is and when it was seen alive."""

    pid: int
    job_id: int
    attempt: int
    index: int
    node_id: str
    first: float
    last: float
    state: str = "R"
    group: int = 0  # its process group: a replica is its group's leader

    @property
    def stopped(self) -> bool:
        return self.state in ("T", "t")

    @property
    def leader(self) -> bool:
        """The replica's own process (not a child of it, such as its parent watch)."""
        return self.pid == self.group


@dataclass
class Overlap:
    """Processes of two or more attempts of one job alive in the same sample."""

    job_id: int
    attempts: tuple[int, ...]
    first: float
    last: float
    samples: int = 1
    pids: set[int] = field(default_factory=set)


def process_stat(pid: int | str) -> tuple[str, str, int] | None:
    """(state, start time in clock ticks, process group) of /proc/<pid>/stat; None once
    it is gone."""
    fields = stat_fields(pid)
    return (fields[0], fields[19], int(fields[2])) if fields and len(fields) > 19 else None


def _environ(pid: str) -> dict[str, str] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            env[name.decode(errors="replace")] = value.decode(errors="replace")
    return env


class ProcessWatch:
    """Samples the replica processes whose agents' DATA_DIR lies under `root`."""

    def __init__(self, root: Path, interval: float = 0.2, handed: Handed | None = None) -> None:
        self.root = str(Path(root).absolute())
        self.interval = interval
        self.handed = handed  # None: no warm pool, every replica is known by its environment
        self._handed: dict[int, tuple[int, int, int, str]] = {}
        self._handed_read = 0.0
        self._warm: set[tuple[int, str]] = set()  # marked, no job: read again each sample
        self._warm_live: list[int] = []
        self.seen: dict[tuple[int, str], ReplicaSeen] = {}  # (pid, start ticks) -> replica
        self.overlaps: dict[tuple[int, tuple[int, ...]], Overlap] = {}
        self.samples = 0
        self._unmarked: dict[tuple[int, str], float] = {}  # first seen without marks
        self._ignored: set[tuple[int, str]] = set()
        self._live: list[ReplicaSeen] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-process-watch", daemon=True)

    # -- reading ---------------------------------------------------------------
    def _identify(self, pid: str, key: tuple[int, str], now: float) -> ReplicaSeen | None:
        env = _environ(pid)
        if env is None:
            return None
        data_dir = env.get("COHORT_NODE_DATA_DIR", "")
        if (data_dir == self.root or data_dir.startswith(self.root + os.sep)) and env.get(
            "COHORT_JOB_ID", ""
        ).isdigit():
            return ReplicaSeen(
                int(pid),
                int(env["COHORT_JOB_ID"]),
                int(env.get("COHORT_ATTEMPT", "0")),
                int(env.get("COHORT_REPLICA_INDEX", "0")),
                env.get("COHORT_NODE_ID", ""),
                now,
                now,
            )
        if self.handed is not None and (
            data_dir == self.root or data_dir.startswith(self.root + os.sep)
        ):
            return self._handed_replica(int(pid), key, now)
        first = self._unmarked.setdefault(key, now)
        if now - first > UNMARKED_RECHECK_S:
            self._ignored.add(key)
            self._unmarked.pop(key, None)
        return None

    def _handed_replica(self, pid: int, key: tuple[int, str], now: float) -> ReplicaSeen | None:
        """The replica a warm process was handed, once SQL names its pid; None (and warm)
        until then."""
        assert self.handed is not None
        if pid not in self._handed and now - self._handed_read > HANDED_REFRESH_S:
            self._handed, self._handed_read = self.handed(), now
        found = self._handed.get(pid)
        if found is None:
            self._warm.add(key)
            return None
        self._warm.discard(key)
        job_id, attempt, index, node_id = found
        return ReplicaSeen(pid, job_id, attempt, index, node_id, now, now)

    def warm_live(self) -> list[int]:
        """The pids of the warm processes (marked, handed nothing) alive at the last sample."""
        with self._lock:
            return list(self._warm_live)

    def sample(self) -> list[ReplicaSeen]:
        """Read /proc once: the replica processes alive now (recorded as seen)."""
        now = time.time()
        live: list[ReplicaSeen] = []
        warm: list[int] = []
        present: set[tuple[int, str]] = set()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            stat = process_stat(entry.name)
            if stat is None:
                continue
            state, ticks, group = stat
            key = (int(entry.name), ticks)
            present.add(key)
            if key in self._ignored:
                continue
            replica = self.seen.get(key)
            if replica is None:
                replica = self._identify(entry.name, key, now)
                if replica is None:
                    if key in self._warm and state not in ("Z", "X", "x"):
                        warm.append(key[0])
                    continue
                self.seen[key] = replica
            if state in ("Z", "X", "x"):
                continue  # dead, waiting to be reaped
            replica.last, replica.state, replica.group = now, state, group
            live.append(replica)
        # Forget what no longer exists (pids are reused).
        self._ignored &= present
        self._warm &= present
        for gone in [k for k in self._unmarked if k not in present]:
            del self._unmarked[gone]
        self._note_overlaps(live, now)
        with self._lock:
            self._live = live
            self._warm_live = warm
            self.samples += 1
        return live

    def _note_overlaps(self, live: list[ReplicaSeen], now: float) -> None:
        by_job: dict[int, set[int]] = {}
        for replica in live:
            by_job.setdefault(replica.job_id, set()).add(replica.attempt)
        for job_id, attempts in by_job.items():
            if len(attempts) < 2:
                continue
            key = (job_id, tuple(sorted(attempts)))
            overlap = self.overlaps.get(key)
            if overlap is None:
                overlap = self.overlaps[key] = Overlap(job_id, key[1], now, now, 0)
            overlap.last = now
            overlap.samples += 1
            overlap.pids.update(r.pid for r in live if r.job_id == job_id)

    def live(self) -> list[ReplicaSeen]:
        """The replica processes alive at the last sample."""
        with self._lock:
            return list(self._live)

    # -- the thread ------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
