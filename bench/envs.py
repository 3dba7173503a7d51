"""A job environment's cost on a node (workers/node/envs.py): built cold against found in
the cache, and the cache's size after ten distinct environments.

Each round, in one run and interleaved (the order alternating each round), times
`EnvCache.ensure` for one small package (`tabulate==0.9.0`, from the node's index) twice:
on an empty cache (a fresh DATA_DIR: pip resolves, downloads and installs it, the
environment is made and sealed), and on a cache that already holds it (the lookup a second
job with the same requirements pays). Each round's ratio is cold / cached; the figure is
the median of the per-round ratios, beside the median seconds of each side. Then ten
environments of distinct requirements (tabulate at ten versions) are built into one cache,
and its size is what their `.size` files say (the bytes COHORT_ENV_CACHE_BYTES bounds).

    .venv/bin/python bench/envs.py [--rounds 8]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workers.node.envs import EnvCache  # noqa: E402

PACKAGE = ["tabulate==0.9.0"]
VERSIONS = [f"0.8.{minor}" for minor in range(1, 11)]  # ten distinct environments
NO_BOUND = 1 << 40


def ensure(cache: EnvCache, lines: list[str]) -> float:
    """Seconds `cache` takes to hand out the interpreter of `lines`."""
    begun = time.perf_counter()
    python = cache.ensure(lines, io.StringIO())
    elapsed = time.perf_counter() - begun
    cache.release(python)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cohort-bench-envs-") as root:
        warm = EnvCache(Path(root) / "warm", sys.executable, NO_BOUND, None)
        ensure(warm, PACKAGE)  # the cache the cached side reads
        cold_s, cached_s, ratios = [], [], []
        for number in range(args.rounds):
            cold = EnvCache(Path(root) / f"cold-{number}", sys.executable, NO_BOUND, None)
            sides = [("cold", cold), ("cached", warm)]
            times = {}
            for name, cache in sides if number % 2 == 0 else reversed(sides):
                times[name] = ensure(cache, PACKAGE)
            cold_s.append(times["cold"])
            cached_s.append(times["cached"])
            ratios.append(times["cold"] / times["cached"])
        ten = EnvCache(Path(root) / "ten", sys.executable, NO_BOUND, None)
        for version in VERSIONS:
            ensure(ten, [f"tabulate=={version}"])
        sizes = [int(p.read_text()) for p in ten.root.glob("*.size")]
    assert len(sizes) == len(VERSIONS), sizes  # ten distinct environments, each counted
    print(  # noqa: T201
        json.dumps(
            {
                "rounds": args.rounds,
                "cold_s_median": round(statistics.median(cold_s), 3),
                "cached_s_median": round(statistics.median(cached_s), 5),
                "cold_over_cached_median_ratio": round(statistics.median(ratios), 1),
                "ten_environments_bytes": sum(sizes),
                "per_environment_bytes_median": int(statistics.median(sizes)),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
