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
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.first_step import JOB, first_step  # noqa: E402
from bench.rounds import interleaved, median_row, per_round_ratios, ratio_row  # noqa: E402
from bench.scratch_stack import scratch_stack  # noqa: E402

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
    with tempfile.TemporaryDirectory(prefix="cohort-bench-image-jobs-", dir="/var/tmp") as tmp:
        scratch = Path(tmp)
        build_image(args.engine, args.base, scratch)
        engine = {"COHORT_CONTAINER_ENGINE": args.engine}
        try:
            with scratch_stack(scratch, "image_jobs", engine) as (_, client):
                times = interleaved(
                    {
                        "I": lambda: first_step(client, {**JOB, "image": IMAGE}),
                        "P": lambda: first_step(client, JOB),
                    },
                    args.rounds,
                )
        finally:
            subprocess.run([args.engine, "rmi", "--force", IMAGE], check=False, capture_output=True)
    print(
        f"\n# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores, {args.engine}; {args.rounds} rounds"
    )
    print("| figure | median | runs |")
    print("|---|---:|---|")
    print(median_row("submit to first step, image job", times["I"]))
    print(median_row("submit to first step, process job", times["P"]))
    print(ratio_row("image / process", per_round_ratios(times, "I", "P")))


if __name__ == "__main__":
    main()
