"""One placement pass over large simulated queues and clusters (the pure placer, no I/O).

Every cell is the median wall and CPU time of one `place()` call over N queued jobs on M nodes.
Nodes have 8 CPU slots, a quarter of them also 8 GPUs, and start about a quarter busy;
jobs ask 1-8 replicas, one in five GPUs (1 or 2 per replica), priorities 0-3, one in ten
`spread`. Most of a big queue cannot fit and waits behind the first job that blocks,
which is what a busy shared pool looks like. `--old` also times the walking skeleton's
placer (from git, per-replica scans) side by side where it finishes in reasonable time.

`--ps` turns one job in ten into a parameter_server gang placed by parts (chief with its
evaluator on one node, one in three with `ps: separate`), and times the 10k x 1k cell with
and without them, and the placer of `--against REV` (default main) on the plain queue.

`--fair` times the same cell with the queue spread over 10 and 100 projects of equal
standing (fair sharing between projects of equal priority, services/cluster/fair_share.py),
each holding a random share of the cluster, with and without running quotas, against
the placer of `--against REV` on the one-project queue.

    .venv/bin/python bench/placement.py [--repeat 5] [--old]
    .venv/bin/python bench/placement.py --ps [--against main]
    .venv/bin/python bench/placement.py --fair [--against main]

`--placed` times a workload where most jobs *are* placed: 10k jobs of 1-4 replicas (one
in five 1-2 GPUs a replica, one in ten `spread`, over 4 projects) on 1k nodes of 32 CPU
slots (20-32 of them free), every other one with 16 GPUs (8-16 free). The placer
before issue 18's placed-workload work (bench/placement_reference.py) and this one are
run interleaved, and their assignments and waiting reasons checked equal.

    .venv/bin/python bench/placement.py --placed [--repeat 15]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from services.cluster.fair_share import ProjectState  # noqa: E402
from services.cluster.placement import GangRequest, NodeCapacity, place  # noqa: E402
from services.cluster.placement_roles import ps_parts  # noqa: E402

JOBS = (1_000, 10_000, 100_000)
NODES = (100, 1_000, 10_000)


def make_nodes(count: int, rng: random.Random) -> list[NodeCapacity]:
    nodes = []
    for i in range(count):
        gpus = 8 if i % 4 == 0 else 0
        free_gpus = tuple(g for g in range(gpus) if rng.random() > 0.25)
        nodes.append(
            NodeCapacity(
                id=f"node-{i:05d}",
                address=f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
                slots=8,
                free_slots=rng.randint(4, 8),
                gpus=gpus,
                free_gpus=free_gpus,
            )
        )
    return nodes


def make_queue(count: int, rng: random.Random) -> list[GangRequest]:
    return [
        GangRequest(
            job_id=i,
            replicas=rng.randint(1, 8),
            gpus_per_replica=rng.choice((1, 2)) if rng.random() < 0.2 else 0,
            priority=rng.randint(0, 3),
            seq=i,
            policy="spread" if rng.random() < 0.1 else "pack",
        )
        for i in range(count)
    ]


def with_ps_gangs(queue: list[GangRequest], rng: random.Random) -> list[GangRequest]:
    """One job in ten made a parameter_server gang (CPU), placed by parts."""
    mixed = []
    for job in queue:
        if job.job_id % 10 == 3:
            roles = {
                "chief": 1,
                "worker": rng.randint(1, 4),
                "ps": rng.randint(1, 2),
                "evaluator": rng.randint(0, 1),
            }
            apart = {"ps": "separate"} if rng.random() < 1 / 3 else None
            job = GangRequest(
                job.job_id,
                sum(roles.values()),
                0,
                job.priority,
                job.seq,
                job.policy,
                parts=ps_parts(roles, apart),
            )
        mixed.append(job)
    return mixed


def old_placer(rev: str = "43170dd") -> Callable[..., Any]:
    """place() as of git revision `rev` (default: the skeleton's, the first that had it)."""
    source = subprocess.run(
        ["git", "show", f"{rev}:services/cluster/placement.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    name = f"placement_{rev.replace('/', '_')}"
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses look their module up
    exec(compile(source, f"{name}.py", "exec"), module.__dict__)  # noqa: S102
    return module.place  # type: ignore[no-any-return]


def ps_cell(repeat: int, against: str) -> None:
    """The 10k jobs x 1k nodes cell: plain queue (this placer and `against`'s), and
    the same queue with one job in ten a parameter_server gang."""
    rng = random.Random(7)
    nodes = make_nodes(1_000, rng)
    plain = make_queue(10_000, rng)
    mixed = with_ps_gangs(plain, rng)
    baseline = old_placer(against)
    print(f"{time.strftime('%Y-%m-%d')} {platform.node()} Python {platform.python_version()}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'queue':>26} {'placed':>7} {'wall ms':>9} {'cpu ms':>8}")
    for label, fn, queue in (
        (f"plain, placer of {against}", baseline, plain),
        ("plain, this placer", place, plain),
        ("1 in 10 PS gangs", place, mixed),
    ):
        wall, cpu = timed(fn, queue, nodes, repeat)
        placed = len(fn(queue, nodes).assignments)
        print(f"{label:>26} {placed:>7} {wall * 1e3:>9.1f} {cpu * 1e3:>8.1f}", flush=True)


def over_projects(
    queue: list[GangRequest], count: int, rng: random.Random, quota: int | None = None
) -> tuple[list[GangRequest], dict[int, ProjectState]]:
    """The queue's jobs dealt round robin to `count` projects, each holding some of the
    cluster already (and, with `quota`, that many running replicas at most)."""
    spread = [
        GangRequest(
            j.job_id,
            j.replicas,
            j.gpus_per_replica,
            j.priority,
            j.seq,
            j.policy,
            project=j.job_id % count,
        )
        for j in queue
    ]
    states = {}
    for project in range(count):
        cpu, gpus = rng.randint(0, 40), rng.randint(0, 16)
        states[project] = ProjectState(
            replicas=cpu + gpus,
            cpu_slots=cpu,
            gpus=gpus,
            max_replicas=None if quota is None else max(quota, cpu + gpus),
        )
    return spread, states


def fair_cell(repeat: int, against: str) -> None:
    """The 10k jobs x 1k nodes cell: the one-project queue (this placer and `against`'s),
    then the same jobs over 10 and 100 projects, with and without running quotas."""
    rng = random.Random(7)
    nodes = make_nodes(1_000, rng)
    plain = make_queue(10_000, rng)
    baseline = old_placer(against)
    print(f"{time.strftime('%Y-%m-%d')} {platform.node()} Python {platform.python_version()}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'queue':>34} {'placed':>7} {'wall ms':>9} {'cpu ms':>8}")
    cells: list[tuple[str, Callable[..., Any], list[GangRequest], Any]] = [
        (f"1 project, placer of {against}", baseline, plain, None),
        ("1 project, this placer", place, plain, None),
    ]
    for count in (10, 100):
        cells.append((f"{count} projects", place, *over_projects(plain, count, rng)))
        cells.append(
            (
                f"{count} projects, quota 60 replicas",
                place,
                *over_projects(plain, count, rng, quota=60),
            )
        )
    for label, fn, queue, projects in cells:
        args = (projects,) if projects is not None else ()
        wall, cpu = timed(fn, queue, nodes, repeat, *args)
        placed = len(fn(queue, nodes, *args).assignments)
        print(f"{label:>34} {placed:>7} {wall * 1e3:>9.1f} {cpu * 1e3:>8.1f}", flush=True)


def placed_workload(
    rng: random.Random, jobs: int = 10_000, nodes: int = 1_000
) -> tuple[list[GangRequest], list[NodeCapacity]]:
    """A queue the cluster can hold almost whole: what a pass after a quiet spell, or a
    cluster sized for its work, places."""
    cluster = [
        NodeCapacity(
            id=f"node-{i:05d}",
            address=f"10.0.{i // 256}.{i % 256}",
            slots=32,
            free_slots=rng.randint(20, 32),
            gpus=16 if i % 2 == 0 else 0,
            free_gpus=tuple(range(rng.randint(8, 16))) if i % 2 == 0 else (),
        )
        for i in range(nodes)
    ]
    queue = [
        GangRequest(
            job_id=i,
            replicas=rng.randint(1, 4),
            gpus_per_replica=rng.choice((1, 2)) if rng.random() < 0.2 else 0,
            priority=rng.randint(0, 3),
            seq=i,
            policy="spread" if rng.random() < 0.1 else "pack",
            project=i % 4,
        )
        for i in range(jobs)
    ]
    return queue, cluster


def same_outcome(a: Any, b: Any) -> bool:
    """Whether two placers' results agree: every assignment (node, address, GPUs per
    replica), every waiting reason, and the order considered."""

    def shape(result: Any) -> Any:
        return (
            {
                job: [
                    tuple(p) if isinstance(p, tuple) else (p.node_id, p.address, p.gpu_ids)
                    for p in placements
                ]
                for job, placements in result.assignments.items()
            },
            result.waiting,
            result.order,
        )

    return bool(shape(a) == shape(b))


def placed_cell(repeat: int) -> None:
    """Old (bench/placement_reference.py) and new placer, interleaved on a queue the
    cluster can mostly hold; their assignments checked equal on every pass."""
    sys.path.insert(0, str(ROOT / "bench"))
    from placement_reference import place as reference_place

    queue, cluster = placed_workload(random.Random(7))
    print(f"{time.strftime('%Y-%m-%d')} {platform.node()} Python {platform.python_version()}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    walls: dict[str, list[float]] = {"old": [], "new": []}
    cpus: dict[str, list[float]] = {"old": [], "new": []}
    placed = 0
    for _ in range(repeat):
        results = {}
        for label, fn in (("old", reference_place), ("new", place)):
            wall, cpu = time.perf_counter(), time.process_time()
            results[label] = fn(queue, cluster)
            walls[label].append(time.perf_counter() - wall)
            cpus[label].append(time.process_time() - cpu)
        if not same_outcome(results["old"], results["new"]):
            raise SystemExit("the two placers disagree: not the same assignments")
        placed = len(results["new"].assignments)
    print(
        f"{len(queue)} jobs x {len(cluster)} nodes: {placed} placed by both, the same "
        f"assignments on all {repeat} passes"
    )
    print(f"{'placer':>8} {'wall ms':>9} {'cpu ms':>8} {'cpu vs old':>10}")
    old_cpu = statistics.median(cpus["old"])
    for label in ("old", "new"):
        cpu = statistics.median(cpus[label])
        print(
            f"{label:>8} {statistics.median(walls[label]) * 1e3:>9.1f} {cpu * 1e3:>8.1f} "
            f"{cpu / old_cpu:>10.2f}",
            flush=True,
        )


def timed(
    fn: Callable[..., Any], queue: list[Any], nodes: list[Any], repeat: int, *args: Any
) -> tuple[float, float]:
    """Median wall and CPU seconds of one call. The CPU time is what the pass costs; on
    a shared machine the wall time also counts the time other processes had the core."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        fn(queue, nodes, *args)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--old", action="store_true", help="time the skeleton's placer too")
    parser.add_argument("--ps", action="store_true", help="the parameter_server cell only")
    parser.add_argument(
        "--fair",
        action="store_true",
        help="the fair-sharing cell only: the queue over many projects",
    )
    parser.add_argument(
        "--placed",
        action="store_true",
        help="a queue that is mostly placed: old and new placer, interleaved",
    )
    parser.add_argument(
        "--against", default="main", help="with --ps or --fair: the baseline revision"
    )
    args = parser.parse_args()
    if args.ps:
        ps_cell(args.repeat, args.against)
        return
    if args.fair:
        fair_cell(args.repeat, args.against)
        return
    if args.placed:
        placed_cell(args.repeat)
        return
    rng = random.Random(7)
    old = old_placer() if args.old else None
    print(f"{time.strftime('%Y-%m-%d')} {platform.node()} Python {platform.python_version()}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(
        f"{'jobs':>8} {'nodes':>7} {'placed':>7} {'wall ms':>9} {'cpu ms':>8} {'µs/job':>7} "
        f"{'vs n·log n':>10}" + (f" {'old cpu ms':>11} {'old/new':>8}" if old else "")
    )
    base: float | None = None
    for n_nodes in NODES:
        nodes = make_nodes(n_nodes, rng)
        for n_jobs in JOBS:
            queue = make_queue(n_jobs, rng)
            repeat = max(1, args.repeat if n_jobs * n_nodes <= 10**8 else args.repeat // 2)
            wall, seconds = timed(place, queue, nodes, repeat)
            placed = len(place(queue, nodes).assignments)
            size = n_jobs + n_nodes
            nlogn = size * math.log2(size)
            # Time per n·log n unit, relative to the smallest case: ≤ ~1 is n·log n or better.
            unit = seconds / nlogn
            base = base or unit
            line = (
                f"{n_jobs:>8} {n_nodes:>7} {placed:>7} {wall * 1e3:>9.1f} "
                f"{seconds * 1e3:>8.1f} {seconds / n_jobs * 1e6:>7.2f} {unit / base:>10.2f}"
            )
            if old is not None:
                if n_jobs * n_nodes <= 10**7:
                    _, old_seconds = timed(old, queue, nodes, 1)
                    line += f" {old_seconds * 1e3:>11.1f} {old_seconds / seconds:>8.1f}"
                else:
                    line += f" {'-':>11} {'-':>8}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
