"""Fair sharing between projects, and their running quotas, as the placer applies them.

Pure, like placement.py, which asks this module in what order to consider the queue
and whether a project's quota lets a job start.

Order. Priority first, as before: every job of a higher priority is considered before
any job of a lower one. Among jobs of equal priority, the next one considered is the
oldest queued job of the project that holds the smallest share of the cluster right
now, counting what this pass has placed so far; ties go to the job submitted first.
A project's share is its dominant share (DRF, as YARN's and Mesos' fair schedulers
use it): the larger of the fraction of the cluster's CPU slots and the fraction of its
GPUs that the project's live replicas hold. Within a project, submission order. So a
project that submits a hundred jobs gets one gang placed, then the other project's
oldest job goes, and so on: neither can starve the other, and running shares stay
within about one gang of each other while both have work waiting. The backfill rule is
untouched: it applies to this order as it did to submission order.

Quotas. A job whose gang would take its project past `max_running_replicas` or
`max_gpus` waits, with the reason "project quota: N of M running replicas in use". It
holds no capacity (it could not use it, and other projects' jobs may), but the jobs of
its project behind it wait too: each would take part of the room it waits for (a job
without GPUs still waits only on the replica limit).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class Gang(Protocol):
    """What this module reads of a queued job (placement.GangRequest)."""

    @property
    def job_id(self) -> int: ...
    @property
    def project(self) -> int: ...
    @property
    def priority(self) -> int: ...
    @property
    def seq(self) -> int: ...
    @property
    def replicas(self) -> int: ...
    @property
    def gpus_per_replica(self) -> int: ...


G = TypeVar("G", bound=Gang)


@dataclass(frozen=True)
class ProjectState:
    """A project at the start of a pass: what its live replicas hold, and its running
    limits (None: no limit)."""

    replicas: int = 0  # live replicas, each holding a CPU slot or its GPUs
    cpu_slots: int = 0  # those of them that hold a CPU slot (jobs without GPUs)
    gpus: int = 0
    max_replicas: int | None = None
    max_gpus: int | None = None


class FairQueue(Generic[G]):
    """The queue in fair order (iterate it), the projects' holdings as the pass places
    gangs (`took`), and their running quotas (`quota_wait`)."""

    def __init__(
        self,
        queue: Iterable[G],
        projects: Mapping[int, ProjectState],
        cpu_total: int,
        gpu_total: int,
    ) -> None:
        self._queue = queue
        self._limits = {
            pid: state
            for pid, state in projects.items()
            if state.max_replicas is not None or state.max_gpus is not None
        }
        # [replicas, CPU slots, GPUs] held, per project, updated as gangs are placed.
        self._held = {pid: [s.replicas, s.cpu_slots, s.gpus] for pid, s in projects.items()}
        self._cpu_total, self._gpu_total = cpu_total, gpu_total
        # Projects whose jobs wait behind one of theirs held by a quota, and why.
        self._held_back: dict[int, tuple[bool, str]] = {}  # project -> (GPU jobs only, reason)

    def share(self, project: int) -> float:
        """The project's dominant share of the cluster now (0 holding nothing)."""
        held = self._held.get(project)
        if held is None:
            return 0.0
        cpu = held[1] / self._cpu_total if self._cpu_total else 0.0
        gpu = held[2] / self._gpu_total if self._gpu_total else 0.0
        return max(cpu, gpu)

    def __iter__(self) -> Iterator[G]:
        levels: dict[int, dict[int, list[G]]] = {}
        for request in self._queue:
            levels.setdefault(request.priority, {}).setdefault(request.project, []).append(request)
        for priority in sorted(levels, reverse=True):
            lines = levels[priority]
            for line in lines.values():
                line.sort(key=lambda r: r.seq)
            if len(lines) == 1:  # one project at this priority: nothing to share
                yield from next(iter(lines.values()))
                continue
            # The caller places (or not) each job before asking for the next, so a
            # project's share is read after its last gang was counted.
            heap = [(self.share(pid), line[0].seq, pid, 0) for pid, line in lines.items()]
            heapq.heapify(heap)
            while heap:
                _, _, pid, index = heapq.heappop(heap)
                line = lines[pid]
                yield line[index]
                if index + 1 < len(line):
                    heapq.heappush(heap, (self.share(pid), line[index + 1].seq, pid, index + 1))

    def quota_wait(self, request: Gang) -> str | None:
        """Why the request must wait for its project's running quota, or None."""
        project = request.project
        held_back = self._held_back.get(project)
        if held_back is not None and (request.gpus_per_replica or not held_back[0]):
            return held_back[1]
        state = self._limits.get(project)
        if state is None:
            return None
        held = self._held.get(project) or [0, 0, 0]
        if state.max_replicas is not None and held[0] + request.replicas > state.max_replicas:
            reason = f"project quota: {held[0]} of {state.max_replicas} running replicas in use"
            self._held_back[project] = (False, reason)
            return reason
        gpus = request.replicas * request.gpus_per_replica
        if gpus and state.max_gpus is not None and held[2] + gpus > state.max_gpus:
            reason = f"project quota: {held[2]} of {state.max_gpus} GPUs in use"
            self._held_back[project] = (True, reason)
            return reason
        return None

    def took(self, request: Gang) -> None:
        """Count a gang just placed in its project's holdings."""
        held = self._held.setdefault(request.project, [0, 0, 0])
        held[0] += request.replicas
        if request.gpus_per_replica:
            held[2] += request.replicas * request.gpus_per_replica
        else:
            held[1] += request.replicas
