"""How fast this machine is, in the two units the test suite's time is made of: a pure
Python loop (the control plane's processes are Python) and a fresh process's
`import tensorflow, tf_keras` (every replica's start). Machines of one kind differ from
day to day (docs/benchmarks.md, "The test suite's time"): a suite's time is comparable
across days only beside these figures.

Each figure is the CPU time (user + system) of a fresh interpreter doing only that,
median of `--runs`, measured with getrusage of the finished child.

    .venv/bin/python bench/machine_speed.py [--runs 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import resource
import statistics
import subprocess
import sys

WORKLOADS = {
    "python loop (20M additions)": "s = 0\nfor i in range(20_000_000):\n    s += i\n",
    "import tensorflow, tf_keras": "import tensorflow, tf_keras\n",
}


def cpu_seconds(code: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.processor() or '?'}, "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}"
    )
    print("| workload | CPU s, median (min-max) |\n|---|---:|")
    for name, code in WORKLOADS.items():
        values = [cpu_seconds(code) for _ in range(args.runs)]
        print(f"| {name} | {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}) |")


if __name__ == "__main__":
    main()
