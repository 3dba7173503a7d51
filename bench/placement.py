"""One placement pass over large simulated queues and clusters (the pure placer, no I/O).

Every cell is the median wall and CPU time of one `place()` call over N queued jobs on M nodes.
Nodes have 8 CPU slots, a quarter of them also 8 GPUs, and start about a quarter busy;
jobs ask 1-8 replicas, one in five GPUs (1 or 2 per replica), priorities 0-3, one in ten
`spread`. Most of a big queue cannot fit and waits behind the first job that blocks,
which is what a busy shared pool looks like. `--old` also times the walking skeleton's
placer (from git, per-replica scans) side by side where it finishes in reasonable time.

    .venv/bin/python bench/placement.py [--repeat 5] [--old]
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

from services.cluster.placement import GangRequest, NodeCapacity, place  # noqa: E402

JOBS = (1_000, 10_000, 100_000)
NODES = (100, 1_000, 10_000)


def make_nodes(count: int, rng: random.Random) -> list[NodeCapacity]:
    nodes = []
    for i in range(count):
        gpus = 8 if i % 4 == 0 else 0
        free_gpus = tuple(g for g in range(gpus) if rng.random() > 0.25)
        nodes.append(NodeCapacity(id=f"node-{i:05d}", address=f"10.{i // 65536}.{i // 256 % 256}."
                                  f"{i % 256}", slots=8, free_slots=rng.randint(4, 8),
                                  gpus=gpus, free_gpus=free_gpus))
    return nodes


def make_queue(count: int, rng: random.Random) -> list[GangRequest]:
    return [GangRequest(job_id=i, replicas=rng.randint(1, 8),
                        gpus_per_replica=rng.choice((1, 2)) if rng.random() < 0.2 else 0,
                        priority=rng.randint(0, 3), seq=i,
                        policy="spread" if rng.random() < 0.1 else "pack")
            for i in range(count)]


def old_placer() -> Callable[..., Any]:
    """The skeleton's place() from the first commit that had it."""
    source = subprocess.run(["git", "show", "43170dd:services/cluster/placement.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("old_placement")
    sys.modules["old_placement"] = module  # dataclasses look their module up
    exec(compile(source, "old_placement.py", "exec"), module.__dict__)  # noqa: S102
    return module.place  # type: ignore[no-any-return]


def timed(fn: Callable[..., Any], queue: list[Any], nodes: list[Any], repeat: int
          ) -> tuple[float, float]:
    """Median wall and CPU seconds of one call. The CPU time is what the pass costs; on
    a shared machine the wall time also counts the time other processes had the core."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        fn(queue, nodes)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--old", action="store_true", help="time the skeleton's placer too")
    args = parser.parse_args()
    rng = random.Random(7)
    old = old_placer() if args.old else None
    print(f"{time.strftime('%Y-%m-%d')} {platform.node()} Python {platform.python_version()}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'jobs':>8} {'nodes':>7} {'placed':>7} {'wall ms':>9} {'cpu ms':>8} {'µs/job':>7} "
          f"{'vs n·log n':>10}" + (f" {'old cpu ms':>11} {'old/new':>8}" if old else ""))
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
            line = (f"{n_jobs:>8} {n_nodes:>7} {placed:>7} {wall * 1e3:>9.1f} "
                    f"{seconds * 1e3:>8.1f} {seconds / n_jobs * 1e6:>7.2f} {unit / base:>10.2f}")
            if old is not None:
                if n_jobs * n_nodes <= 10**7:
                    _, old_seconds = timed(old, queue, nodes, 1)
                    line += f" {old_seconds * 1e3:>11.1f} {old_seconds / seconds:>8.1f}"
                else:
                    line += f" {'-':>11} {'-':>8}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
