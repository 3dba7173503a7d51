"""What a whole stack costs to start and stop: the api, the scheduler, one agent and an
embedded redis-server on a fresh PostgreSQL database, as `cohort up` and every real-stack
test start it (cli/stack.py).

Per round: the database is made and migrated first (not timed: the tests copy a migrated
template); then "start" runs from `Stack.start()` to the api's /readyz answering and the
agent's node registered, the stack idles `--idle` seconds, and "stop" is `Stack.stop()`.
"CPU" is the CPU time of the stack's processes and of this one over the round, start to
stop, idle included (getrusage of this process and its reaped children).

`--against DIR` measures another checkout of Cohort (e.g. a `git worktree` of an earlier
commit) side by side: each round runs this same measuring code once per checkout, in a
fresh process whose imports come from that checkout (its directory first on sys.path;
the stack's processes are started from it too), alternating A, B, A, B...; medians per
checkout and the median of the per-round ratios B / A (the order swapped every round).

    .venv/bin/python bench/stack_lifecycle.py [--rounds 5] [--idle 2] [--against DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_round(idle: float) -> dict[str, float]:
    """Start and stop one stack with the Cohort of the working directory."""
    sys.path.insert(0, os.getcwd())
    from bench.pg import DEFAULT_SERVER, drop_database, new_database
    from cli.stack import Stack, migrate
    from tests.e2e.conftest import free_port

    def cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    database = new_database(DEFAULT_SERVER, "cohort_bench_stack")
    workdir = Path(tempfile.mkdtemp(prefix="cohort-bench-stack-"))
    workdir.chmod(0o711)  # an agent as root runs replicas as other users: they pass through
    try:
        migrate(database)
        stack = Stack(
            {
                "COHORT_DATABASE_URL": database,
                "COHORT_REDIS_URL": "",
                "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
                "COHORT_API_PORT": str(free_port()),
                "COHORT_DATA_DIR": str(workdir / "data"),
                "COHORT_BOOTSTRAP_TOKEN": "bench-bootstrap-token-for-this-only",
            },
            quiet=True,
        )
        began, cpu_began = time.monotonic(), cpu()
        stack.start()
        started = time.monotonic()
        time.sleep(idle)
        stopping = time.monotonic()
        stack.stop()
        stopped = time.monotonic()
        return {
            "start": started - began,
            "stop": stopped - stopping,
            "cpu": cpu() - cpu_began,
            "module": sys.modules["cli.stack"].__file__ or "",
        }
    finally:
        drop_database(DEFAULT_SERVER, database)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--idle", type=float, default=2.0)
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        help="another checkout of Cohort, measured side by side",
    )
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_round(args.idle)))
        return
    trees = {"this": ROOT, **({"against": args.against.resolve()} if args.against else {})}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(trees)[::-1]  # swapped every round
        for name in order:
            tree = trees[name]
            done = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--one", "--idle", str(args.idle)],
                cwd=tree,
                capture_output=True,
                text=True,
                check=True,
            )
            round_ = json.loads(done.stdout.strip().splitlines()[-1])
            assert str(round_["module"]).startswith(str(tree)), round_  # imports from `tree`
            results[name].append(round_)
    print(f"{args.rounds} rounds each, idle {args.idle:g} s; medians (min-max)")
    print("| checkout | start s | stop s | CPU s |\n|---|---:|---:|---:|")
    for name, rounds in results.items():
        cells = []
        for key in ("start", "stop", "cpu"):
            values = [float(r[key]) for r in rounds]
            cells.append(f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})")
        print(f"| {name} ({trees[name]}) | " + " | ".join(cells) + " |")
    if args.against:  # the median of the per-round ratios, never a ratio of medians
        cells = []
        for key in ("start", "stop", "cpu"):
            ratios = [
                float(a[key]) / float(b[key])
                for a, b in zip(results["against"], results["this"], strict=True)
            ]
            shown = ", ".join(f"{r:.2f}" for r in ratios)
            cells.append(f"{statistics.median(ratios):.2f}x ({shown})")
        print("| against / this, median of per-round ratios | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
