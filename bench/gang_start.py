"""A 2-worker MultiWorkerMirroredStrategy gang's start when its workers come up a little
apart, with and without the gRPC option the agent gives a gang's replicas
(workers/node/environment.py GANG_GRPC_OPTIONS): side by side, interleaved.

Each gang is two fresh processes that have imported what a warm replica process imports
(workers/replica/pool_entry.py `warm_up`, the default preload included), then wait. At
"go" worker 1 starts its strategy at once and worker 0 `--late` seconds later, as two
hand-offs or spawns a few hundred ms apart do; each then runs bench/plain_mlp.py's MLP to
its first step. The figure: "go" to the later worker's first step. Both sides' four
processes are made ready together, so both start from the same state (imported, the
machine quiet); the side that goes first turns each round (bench/rounds.py).

    .venv/bin/python bench/gang_start.py [--rounds 5] [--late 0.3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import free_port  # noqa: E402
from workers.node.environment import GANG_GRPC_OPTIONS  # noqa: E402


def worker(index: int, late: float, ports: list[int]) -> None:
    """One gang worker: ready, then at "go" (a line on stdin) its first step's time."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    from workers.replica.pool_entry import warm_up

    warm_up()
    sys.path.insert(0, str(ROOT / "bench"))
    import plain_mlp
    import tensorflow as tf

    print("ready", flush=True)
    sys.stdin.readline()
    go = time.time()
    time.sleep(late if index == 0 else 0.0)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": index}}
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    hp = {**plain_mlp.HP, "epochs": 1, "steps_per_epoch": 2}
    result = plain_mlp.run(strategy, index, 2, hp, [])
    print(json.dumps({"first": result["bench_first_step"] - go}), flush=True)


class Gang:
    """Two worker processes, started and ready; `run` gives them "go"."""

    def __init__(self, late: float, grpc_options: str | None) -> None:
        env = {k: v for k, v in os.environ.items() if k != "TF_GRPC_DEFAULT_OPTIONS"}
        env["TF_CPP_MIN_LOG_LEVEL"] = "3"
        if grpc_options is not None:
            env["TF_GRPC_DEFAULT_OPTIONS"] = grpc_options
        ports = [free_port(), free_port()]
        self.workers = [
            subprocess.Popen(  # noqa: S603 - this file, an argv
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    str(i),
                    "--late",
                    str(late),
                    "--ports",
                    ",".join(map(str, ports)),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
            )
            for i in range(2)
        ]

    def wait_ready(self) -> None:
        for process in self.workers:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"

    def run(self) -> float:
        for process in self.workers:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        firsts = []
        for process in self.workers:
            assert process.stdout is not None
            firsts.append(json.loads(process.stdout.readline())["first"])
            process.wait(timeout=120)
        return max(firsts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--late", type=float, default=0.3, help="worker 0's delay, seconds")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--ports", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.late, [int(p) for p in args.ports.split(",")])
        return
    sides = {"this": GANG_GRPC_OPTIONS, "gRPC default": None}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(args.rounds + 1):
        gangs = {name: Gang(args.late, options) for name, options in sides.items()}
        for gang in gangs.values():
            gang.wait_ready()
        time.sleep(2.0)  # the imports' last threads done: the machine quiet
        order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
        took = {name: gangs[name].run() for name in order}
        label = "warm-up" if round_ == 0 else f"round {round_}"
        print(
            f"{label} ({' - '.join(order)}): " + ", ".join(f"{n} {took[n]:.2f} s" for n in order),
            flush=True,
        )
        if round_:
            for name in sides:
                times[name].append(took[name])
    ratios = [a / b for a, b in zip(times["this"], times["gRPC default"], strict=True)]
    print(
        f"\n# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; worker 0 {args.late} s late"
    )
    for name, values in times.items():
        print(
            f"{name}: go -> first step, median {statistics.median(values):.2f} s "
            f"({', '.join(f'{v:.2f}' for v in values)})"
        )
    print(
        f"this / gRPC default per round: {', '.join(f'{r:.3f}' for r in ratios)} "
        f"(median {statistics.median(ratios):.3f})"
    )


if __name__ == "__main__":
    main()
