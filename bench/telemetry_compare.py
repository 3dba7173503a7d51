"""bench/telemetry_load.py side by side: this checkout's api and scheduler against
another's (the commit before, say), a fresh database and stack per side and round, the
order swapped every round. Per N: each side's emit -> SSE p50 and p99, emit -> live feed
p99 (the ingest's share) and points stored a second, then the per-round ratios (this /
against) and their median (never a ratio of medians).

    .venv/bin/python bench/telemetry_compare.py --against /tmp/before [--rounds 3] \\
        [telemetry_load.py's options: --jobs 210 --redis redis://127.0.0.1:6379/13 ...]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.telemetry_load import Round, arguments, print_table, run_side  # noqa: E402

FIGURES = ("p50", "p99", "feed_p99", "stored", "api_cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    own, rest = parser.parse_known_args()
    args = arguments(rest)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sides = {"this": args.tree, "against": own.against}
    runs: dict[str, list[list[Round]]] = {"this": [], "against": []}
    for round_ in range(1, own.rounds + 1):
        order = list(sides) if round_ % 2 else list(sides)[::-1]
        for side in order:
            print(f"--- round {round_}, {side} (load average {os.getloadavg()[0]:.1f})")
            runs[side].append(run_side(args, sides[side]))
            print_table(runs[side][-1])
    print(f"\nthis: {args.tree}; against: {own.against}; {own.rounds} interleaved rounds")
    print("| N | figure | this | against | this / against per round | median |")
    print("|---|---|---|---|---|---|")
    for i, n in enumerate(int(n) for n in args.jobs.split(",")):
        for figure in FIGURES:
            this = [getattr(r[i], figure) for r in runs["this"]]
            other = [getattr(r[i], figure) for r in runs["against"]]
            ratios = [a / b for a, b in zip(this, other, strict=True)]
            print(
                f"| {n} | {figure} | {', '.join(f'{v:,.1f}' for v in this)} | "
                f"{', '.join(f'{v:,.1f}' for v in other)} | "
                f"{', '.join(f'{r:.2f}' for r in ratios)} | {statistics.median(ratios):.2f} |"
            )


if __name__ == "__main__":
    main()
