"""Overhead of step-level backups on steady step time: the built-in `mlp_digits` with its
default backups (`checkpoint_every_steps` = workers/replica/backups.py
DEFAULT_BACKUP_STEPS, and the "checkpoint now" hooks: a flag per step, and under a
multi-worker gang an all-reduce every DECISION_STEPS steps) against the same run with
`backups: false` (no backup callback at all), side by side.

Each run is launched as the node agent would launch it, without the control plane:
`python -m workers.replica.runner` processes (one_device, or a multi_worker_mirrored
gang of `--replicas` on loopback ports) with their spec files. Steady step time: the
mean of replica 0's `step_time` points after its first epoch (tracing, start-up); a
mean, not a median, so that the steps which also save a backup weigh in. Rounds are
interleaved (bench/rounds.py: on and off once a round, the order swapped every round,
a warm-up round not kept); the figure is the median of the per-round ratios on / off.

    .venv/bin/python bench/step_backups.py [--rounds 5] [--replicas 1] [--steps 300]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rounds import interleaved, per_round_ratios, ratio_row  # noqa: E402
from tests.replica_runs import (  # noqa: E402
    METRICS_FILE,
    reported,
    runner_env,
    start_runner,
    worker_configs,
    write_launch,
)
from workers.replica.backups import DECISION_STEPS, DEFAULT_BACKUP_STEPS  # noqa: E402

EPOCHS = 3


def launch(workdir: Path, replicas: int, hyperparameters: dict[str, Any]) -> list[Path]:
    """Run one job's replicas to the end; returns their metrics files."""
    job_dir = Path(tempfile.mkdtemp(prefix="job-", dir=workdir))
    processes, files = [], []
    for index, tf_config in enumerate(worker_configs(replicas)):
        spec = {
            "job_id": 1,
            "attempt": 1,
            "index": index,
            "replicas": replicas,
            "trainer": "mlp_digits",
            "strategy": "one_device" if replicas == 1 else "multi_worker_mirrored",
            "hyperparameters": hyperparameters,
        }
        launch_file = write_launch(job_dir / f"replica-{index}", spec, job_dir)
        with open(job_dir / f"replica-{index}.log", "wb") as log:
            processes.append(start_runner(runner_env(launch_file, tf_config), log))
        files.append(launch_file.parent / METRICS_FILE)
    codes = [process.wait(timeout=600) for process in processes]
    if codes != [0] * replicas:
        raise SystemExit(f"replicas exited {codes}: see {job_dir}")
    return files


def steady_step(metrics_file: Path) -> float:
    """Mean step_time (s) of the steps after the first epoch."""
    times = [
        value
        for step, name, value, _, epoch in reported(metrics_file)
        if name == "step_time" and epoch is not None and epoch >= 1
    ]
    if not times:
        raise SystemExit(f"no step_time points after the first epoch in {metrics_file}")
    return statistics.fmean(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--steps", type=int, default=300, help="steps per epoch (3 epochs)")
    parser.add_argument("--every", type=int, default=DEFAULT_BACKUP_STEPS)
    args = parser.parse_args()
    base = {"epochs": EPOCHS, "steps_per_epoch": args.steps, "seed": 0}
    with tempfile.TemporaryDirectory(prefix="step-backups-") as tmp:
        workdir = Path(tmp)

        def side(hyperparameters: dict[str, Any]) -> Any:
            return lambda: steady_step(launch(workdir, args.replicas, hyperparameters)[0]) * 1e3

        times = interleaved(
            {
                "on": side({**base, "checkpoint_every_steps": args.every}),
                "off": side({**base, "backups": False}),
            },
            args.rounds,
        )
    ratios = per_round_ratios(times, "on", "off")
    strategy = "one_device" if args.replicas == 1 else f"{args.replicas}-worker gang"
    print(  # noqa: T201 - the bench's output
        f"\nmlp_digits {strategy}, {EPOCHS}x{args.steps} steps, backup every {args.every} "
        f"steps, decision every {DECISION_STEPS if args.replicas > 1 else 1}; "
        f"{platform.node()}, {os.cpu_count()} CPUs\n"
        f"steady step on: {statistics.median(times['on']):.3f} ms, "
        f"off: {statistics.median(times['off']):.3f} ms (medians; the 's' above are ms)\n"
        "| figure | median | rounds |\n|---|---|---|\n"
        + ratio_row("steady step time, backups on / off", ratios)
    )


if __name__ == "__main__":
    main()
