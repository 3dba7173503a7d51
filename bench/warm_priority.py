"""A warm replica process's warm-up on a busy node: from its start to ready.

An agent's pool (workers/node/pool.py, a real `ReplicaPool` of one process) starts a warm
process while `--hogs` busy loops run, each a session (an autogroup) of its own, as
replicas are; the time until the process says it is ready (TensorFlow and tf_keras
imported) is measured. A warm process yields for its first seconds at the lowest priority
(workers/process_priority.py), then runs at normal priority: what decides this figure is
whether it really gets back to normal priority while its import holds the GIL.

`--against DIR` measures another checkout side by side (its pool, and its warm process's
code: the interpreter is run with DIR first on PYTHONPATH), interleaved, the order
swapped every round after a warm-up round; each side's median, and the median of the
per-round ratios against / this (bench/rounds.py).

    .venv/bin/python bench/warm_priority.py [--rounds 3] [--hogs 4] [--against DIR]
"""

from __future__ import annotations

import argparse
import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rounds import interleaved, median_row, per_round_ratios, ratio_row  # noqa: E402

TIMEOUT = 900.0


def one(hogs: int) -> float:
    """Seconds from a pool's start to its one warm process ready, beside `hogs` busy
    loops (run in a process whose imports come from the checkout it runs in)."""
    sys.path.insert(0, os.getcwd())
    from workers.node.pool import ReplicaPool

    with tempfile.TemporaryDirectory(prefix="cohort-bench-warm-") as scratch:
        # The warm process imports this checkout's code too (the editable install would
        # otherwise give it the development tree's).
        python = Path(scratch) / "python"
        python.write_text(f'#!/bin/sh\nPYTHONPATH={os.getcwd()} exec {sys.executable} "$@"\n')
        python.chmod(stat.S_IRWXU)
        busy = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(hogs)
        ]
        pool = ReplicaPool(1, str(python), "bench-warm", Path(scratch) / "data")
        try:
            began = time.monotonic()
            pool.start()
            while not pool.ready_pids():
                if time.monotonic() - began > TIMEOUT:
                    raise RuntimeError(f"no warm process ready in {TIMEOUT:.0f}s")
                time.sleep(0.05)
            return time.monotonic() - began
        finally:
            for process in busy:
                process.kill()
                process.wait()
            pool.shutdown()


def side(tree: Path, hogs: int) -> float:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "warm_priority.py"), "--one", "--hogs", str(hogs)],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=4, help="busy loops beside it")
    parser.add_argument("--against", type=Path, help="another checkout, measured beside")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(f"{one(args.hogs):.3f}")
        return
    trees = {"this": ROOT, **({"against": args.against.resolve()} if args.against else {})}
    times = interleaved(
        {name: (lambda tree=tree: side(tree, args.hogs)) for name, tree in trees.items()},
        args.rounds,
    )
    print(f"\n{args.hogs} busy loops beside; start to ready, {args.rounds} rounds")
    print("| side | median | rounds |\n|---|---:|---|")
    for name in trees:
        print(median_row(name, times[name]))
    if args.against:
        print(ratio_row("against / this", per_round_ratios(times, "against", "this")))


if __name__ == "__main__":
    main()
