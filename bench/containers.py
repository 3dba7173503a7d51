"""Cohort in containers against Cohort as processes, side by side in one run.

(1) `make compose-up` to ready: from nothing (volumes removed: PostgreSQL initialised,
    migrations, the bucket) and from a stack stopped with its volumes kept, images warm
    (deploy/compose.py builds them first: a warm cache makes that seconds). Each round
    starts from `compose-down` of the stack.
(2) submit to first step: the same 2-replica MultiWorkerMirroredStrategy job (the built-in
    trainer, 1 epoch x 20 steps) POSTed to the compose stack (C: api, scheduler and one
    agent in containers, the stand-ins or pinned images for PostgreSQL, Redis and S3) and to
    a `cohort up` stack of processes (P: the same parts on this host's PostgreSQL and an
    embedded redis-server), interleaved after one warm-up pair, the order swapped every
    round (bench/rounds.py), both stacks up and idle before each job. The time runs from
    the POST to the later of the two replicas' first stored step (the point's own time: one
    kernel clock for both). The figure is the median of the per-round ratios C / P.

    .venv/bin/python bench/containers.py [--rounds 5] [--up-rounds 2]

Needs a Docker daemon (deploy/compose.py starts one as root). Its compose project, port and
state directory are its own (cohort-bench, var/compose-bench), removed at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.first_step import first_step  # noqa: E402
from bench.rounds import interleaved, median_row, per_round_ratios, ratio_row  # noqa: E402
from bench.scratch_stack import scratch_stack  # noqa: E402
from cohort.client import Client  # noqa: E402
from tests.e2e.conftest import free_port  # noqa: E402


def compose(verb: str, env: dict[str, str], *flags: str) -> float:
    started = time.monotonic()
    subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "compose.py"), verb, *flags],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--up-rounds", type=int, default=2)
    args = parser.parse_args()
    state = ROOT / "var" / "compose-bench"
    env = {
        **os.environ,
        "COHORT_COMPOSE_PROJECT": "cohort-bench",
        "COHORT_COMPOSE_PORT": str(free_port()),
        "COHORT_COMPOSE_DIR": str(state),
    }
    cold, warm = [], []
    compose("down", env, "--volumes")
    for _ in range(args.up_rounds):
        cold.append(compose("up", env))
        compose("down", env)
        warm.append(compose("up", env))
        compose("down", env, "--volumes")
    compose("up", env)
    token = (state / "token").read_text().strip()
    containers = Client(f"http://127.0.0.1:{env['COHORT_COMPOSE_PORT']}", token, 120)
    with tempfile.TemporaryDirectory(prefix="cohort-bench-containers-") as scratch:
        try:
            with scratch_stack(Path(scratch), "containers") as (_, processes):
                times = interleaved(
                    {"C": lambda: first_step(containers), "P": lambda: first_step(processes)},
                    args.rounds,
                )
        finally:
            compose("down", env, "--volumes")
    print(
        f"\n# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores; {args.up_rounds} compose-up rounds, {args.rounds} job rounds"
    )
    print("| figure | median | runs |")
    print("|---|---:|---|")
    print(median_row("compose-up to ready, from nothing", cold, digits=1))
    print(median_row("compose-up to ready, volumes kept", warm, digits=1))
    print(median_row("submit to first step, containers", times["C"]))
    print(median_row("submit to first step, processes", times["P"]))
    print(ratio_row("containers / processes", per_round_ratios(times, "C", "P")))


if __name__ == "__main__":
    main()
