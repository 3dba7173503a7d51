"""Cohort in containers against Cohort as processes, side by side in one run.

(1) `make compose-up` to ready: from nothing (volumes removed: PostgreSQL initialised,
    migrations, the bucket) and from a stack stopped with its volumes kept, images warm
    (deploy/compose.py builds them first: a warm cache makes that seconds). Each round
    starts from `compose-down` of the stack.
(2) submit to first step: the same 2-replica MultiWorkerMirroredStrategy job (the built-in
    trainer, 1 epoch x 20 steps) POSTed to the compose stack (C: api, scheduler and one
    agent in containers, the stand-ins or pinned images for PostgreSQL, Redis and S3) and to
    a `cohort up` stack of processes (P: the same parts on this host's PostgreSQL and an
    embedded redis-server), interleaved C, P, C, P... after one warm-up pair, both stacks
    up and idle before each job. The time runs from the POST to the later of the two
    replicas' first stored step (the point's own time: one kernel clock for both). The
    figure is the median of the per-round ratios C / P.

    .venv/bin/python bench/containers.py [--rounds 5] [--up-rounds 2]

Needs a Docker daemon (deploy/compose.py starts one as root). Its compose project, port and
state directory are its own (cohort-bench, var/compose-bench), removed at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.first_step import first_step  # noqa: E402
from bench.pg import DEFAULT_SERVER, drop_database, new_database  # noqa: E402
from cli.stack import Stack  # noqa: E402
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
    ratios, c_times, p_times = [], [], []
    with tempfile.TemporaryDirectory(prefix="cohort-bench-containers-") as scratch:
        workdir = Path(scratch)
        workdir.chmod(0o711)  # replicas of a root agent run as their job's uid
        database = new_database(DEFAULT_SERVER, "cohort_bench_containers")
        stack = Stack(
            {
                "COHORT_DATA_DIR": str(workdir / "var"),
                "COHORT_DATABASE_URL": database,
                "COHORT_API_PORT": str(free_port()),
                "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
            },
            quiet=True,
        )
        try:
            stack.start()
            processes = Client(stack.url, stack.token, timeout=120)
            for round_ in range(args.rounds + 1):  # round 0 warms both up
                c, p = first_step(containers), first_step(processes)
                label = "warm-up" if round_ == 0 else f"round {round_}"
                print(f"{label}: C {c:.2f} s, P {p:.2f} s", flush=True)
                if round_:
                    c_times.append(c)
                    p_times.append(p)
                    ratios.append(c / p)
        finally:
            stack.stop()
            drop_database(DEFAULT_SERVER, database)
            compose("down", env, "--volumes")
    print(
        f"\n# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores; {args.up_rounds} compose-up rounds, {args.rounds} job rounds"
    )
    print("| figure | median | runs |")
    print("|---|---:|---|")
    for name, runs in (("from nothing", cold), ("volumes kept", warm)):
        shown = ", ".join(f"{r:.1f}" for r in runs)
        print(f"| compose-up to ready, {name} | {statistics.median(runs):.1f} s | {shown} |")
    print(f"| submit to first step, containers | {statistics.median(c_times):.2f} s | |")
    print(f"| submit to first step, processes | {statistics.median(p_times):.2f} s | |")
    shown = ", ".join(f"{r:.2f}" for r in ratios)
    median = statistics.median(ratios)
    print(f"| containers / processes, median of per-round ratios | {median:.2f} | {shown} |")


if __name__ == "__main__":
    main()
