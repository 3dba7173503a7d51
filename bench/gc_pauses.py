"""What Python's cycle collector costs each process of a run: a command run with a probe in
every Python process it starts (bench/gc_probe/sitecustomize.py, through PYTHONPATH), then
per process and generation the collections, the three longest (CPU of the collecting
thread, which holds the GIL: an event loop or a thread waits that long) and their total.

    .venv/bin/python bench/gc_pauses.py --dir /tmp/gc-run -- \\
        .venv/bin/python bench/telemetry_load.py --jobs 210 --redis redis://127.0.0.1:6379/13
    .venv/bin/python bench/gc_pauses.py --dir /tmp/gc-run        # the table again

A process whose environment is rebuilt without PYTHONPATH (a replica) is not probed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

PROBE = Path(__file__).resolve().parent / "gc_probe"


def summary(directory: Path) -> list[str]:
    """The table's rows: process, generation, count, longest three and total CPU (ms)."""
    rows = []
    for path in sorted(directory.glob("*.gc")):
        lines = path.read_text().splitlines()
        if not lines:
            continue
        command = lines[0].removeprefix("# ")[:60]
        by_generation: dict[int, list[float]] = {}
        for line in lines[1:]:
            generation, cpu = line.split()
            by_generation.setdefault(int(generation), []).append(float(cpu))
        for generation, cpus in sorted(by_generation.items()):
            longest = ", ".join(f"{c:.0f}" for c in sorted(cpus)[-3:][::-1])
            rows.append(
                f"| `{command}` ({path.stem}) | {generation} | {len(cpus)} | {longest} | "
                f"{sum(cpus):.0f} |"
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, required=True, help="where the probes write")
    parser.add_argument("command", nargs="*", help="after --: the command to run")
    args = parser.parse_args()
    if args.command:
        args.dir.mkdir(parents=True, exist_ok=True)
        paths = [str(PROBE), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "COHORT_GC_PROBE": str(args.dir)}
        code = subprocess.call(args.command, env=env)  # noqa: S603 - the operator's command
        if code:
            sys.exit(code)
    print("| process | generation | collections | longest three, CPU ms | total CPU ms |")
    print("|---|---:|---:|---|---:|")
    print("\n".join(summary(args.dir)))


if __name__ == "__main__":
    main()
