"""Submit to first step of an image job (issue 32) against the same job as processes.

One `cohort up`-style stack (this host's PostgreSQL, an embedded redis-server, one agent
with COHORT_CONTAINER_ENGINE set) runs the same 2-replica MultiWorkerMirroredStrategy job
(the built-in mlp_digits trainer, 1 epoch x 20 steps) as processes (P) and with
`image:` (I: each replica a container of an image built FROM cohort-worker, present on the
node), interleaved after one warm-up pair, the order swapped every round, the stack idle
before each job. The time runs from the POST to the later of the two replicas' first
stored step (the point's own time: one kernel clock for both). The figure is the median of
the per-round ratios I / P.

    .venv/bin/python bench/image_jobs.py [--rounds 5] [--engine docker]

Needs the engine and `make images` (cohort-worker:latest). The image it builds
(localhost/cohort-bench-image-job:1) is removed at the end.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.first_step import JOB, first_step  # noqa: E402
from bench.pg import DEFAULT_SERVER, drop_database, new_database  # noqa: E402
from cli.stack import Stack  # noqa: E402
from cohort.client import Client  # noqa: E402
from tests.e2e.conftest import free_port  # noqa: E402

IMAGE = "localhost/cohort-bench-image-job:1"


def build_image(engine: str, base: str, scratch: Path) -> None:
    """An image FROM cohort-worker (nothing added: what is measured is the container)."""
    context = scratch / "image"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {base}\nLABEL cohort.bench=image-jobs\n")
    subprocess.run(
        [engine, "build", "--tag", IMAGE, str(context)], check=True, stdout=subprocess.DEVNULL
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--engine", default="docker")
    parser.add_argument("--base", default="cohort-worker:latest")
    args = parser.parse_args()
    ratios, i_times, p_times = [], [], []
    with tempfile.TemporaryDirectory(prefix="cohort-bench-image-jobs-", dir="/var/tmp") as tmp:
        scratch = Path(tmp)
        scratch.chmod(0o711)  # replicas of a root agent run as their job's uid
        build_image(args.engine, args.base, scratch)
        database = new_database(DEFAULT_SERVER, "cohort_bench_image_jobs")
        stack = Stack(
            {
                "COHORT_DATA_DIR": str(scratch / "var"),
                "COHORT_DATABASE_URL": database,
                "COHORT_API_PORT": str(free_port()),
                "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
                "COHORT_CONTAINER_ENGINE": args.engine,
            },
            quiet=True,
        )
        try:
            stack.start()
            client = Client(stack.url, stack.token, timeout=120)
            for round_ in range(args.rounds + 1):  # round 0 warms both up
                order = ("I", "P") if round_ % 2 == 0 else ("P", "I")
                took = {
                    kind: first_step(client, {**JOB, "image": IMAGE} if kind == "I" else JOB)
                    for kind in order
                }
                label = "warm-up" if round_ == 0 else f"round {round_}"
                print(f"{label} ({'-'.join(order)}): I {took['I']:.2f} s, P {took['P']:.2f} s")
                if round_:
                    i_times.append(took["I"])
                    p_times.append(took["P"])
                    ratios.append(took["I"] / took["P"])
        finally:
            stack.stop()
            drop_database(DEFAULT_SERVER, database)
            subprocess.run([args.engine, "rmi", "--force", IMAGE], check=False, capture_output=True)
    print(
        f"\n# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores, {args.engine}; {args.rounds} rounds"
    )
    print("| figure | median | runs |")
    print("|---|---:|---|")
    for name, runs in (("image job", i_times), ("process job", p_times)):
        shown = ", ".join(f"{r:.2f}" for r in runs)
        print(f"| submit to first step, {name} | {statistics.median(runs):.2f} s | {shown} |")
    shown = ", ".join(f"{r:.2f}" for r in ratios)
    median = statistics.median(ratios)
    print(f"| image / process, median of per-round ratios | {median:.2f} | {shown} |")


if __name__ == "__main__":
    main()
