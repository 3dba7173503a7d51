"""Training speed per strategy: the same built-in trainer under each, side by side.

Each case is launched as the node agent would launch it, without the control plane:
`python -m workers.replica.runner` processes with their launch files and a hand-made
TF_CONFIG on loopback ports (tests/replica_runs.py), each writing its metrics file. A
case's speed is read from the chief's own `step_time` points (replica 0) after its first epoch
(tracing, start-up): steps/s = 1 / median step time, examples/s = steps/s x the
examples one step takes (the global batch: `batch_size` per replica in sync; one
worker's batch under parameter_server, whose workers step independently).
Runs are interleaved (every case once, then again) so machine noise hits all alike;
the figures are medians over the runs, and each case is compared with its baseline
by the median of the runs' ratios of examples/s (each run's cases ran side by side).

    .venv/bin/python bench/strategies.py [--runs 3] [--trainers mlp_digits,cnn_digits]

A case is one row of CASES: add rows (another distribution option, another
strategy) and they are run and compared like the others.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from services.jobs.trainers import BUILTIN_TRAINERS  # noqa: E402
from tests.replica_runs import (  # noqa: E402
    METRICS_FILE,
    cluster_configs,
    reported,
    runner_env,
    start_runner,
    write_launch,
)

HP = {"epochs": 3, "steps_per_epoch": 100, "batch_size": 32}
PS_ROLES = [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]
TIMEOUT = 600.0  # seconds for one case's run


@dataclass(frozen=True)
class Case:
    """One way to train, compared with `baseline` (another case's name)."""

    name: str
    strategy: str
    distribution: dict[str, Any] = field(default_factory=dict)
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    workers: int = 1  # processes of a multi_worker_mirrored gang
    baseline: str = "one_device"

    def roles(self) -> list[tuple[str, int]]:
        """(role, role_index) of each process, by gang index."""
        if self.strategy == "parameter_server":
            return PS_ROLES
        return [("worker", index) for index in range(self.workers)]

    def examples_per_step(self) -> int:
        """Examples one step of the chief's step series takes."""
        batch = int({**HP, **self.hyperparameters}["batch_size"])
        if self.strategy == "mirrored":
            return batch * int(self.distribution.get("cpu_devices") or 1)
        if self.strategy == "multi_worker_mirrored":
            return batch * self.workers
        return batch


CASES = [
    Case("one_device", "one_device"),
    Case("mirrored, cpu_devices=2", "mirrored", {"cpu_devices": 2}),
    Case(
        "multi_worker_mirrored x2, auto",
        "multi_worker_mirrored",
        {"communication": "auto"},
        workers=2,
    ),
    Case(
        "multi_worker_mirrored x2, ring",
        "multi_worker_mirrored",
        {"communication": "ring"},
        workers=2,
        baseline="multi_worker_mirrored x2, auto",
    ),
    Case("parameter_server chief+2w+1ps", "parameter_server"),
]


def launch(case: Case, trainer: str, job_id: int, workdir: Path) -> list[subprocess.Popen[bytes]]:
    """Start the case's processes, as the agent would (launch file, TF_CONFIG)."""
    job_dir = workdir / f"job-{job_id}"
    roles = case.roles()
    processes = []
    for index, ((role, role_index), tf_config) in enumerate(
        zip(roles, cluster_configs(roles), strict=True)
    ):
        spec = {
            "job_id": job_id,
            "attempt": 1,
            "index": index,
            "replicas": len(roles),
            "trainer": trainer,
            "strategy": case.strategy,
            "role": role,
            "role_index": role_index,
            "distribution": case.distribution,
            "hyperparameters": {**HP, **case.hyperparameters},
        }
        launch_file = write_launch(job_dir / f"replica-{index}", spec, job_dir)
        with open(job_dir / f"replica-{index}.log", "wb") as log:
            processes.append(start_runner(runner_env(launch_file, tf_config), log))
    return processes


def run_case(case: Case, trainer: str, job_id: int, workdir: Path) -> float:
    """Train once; the chief's steps per second after its first epoch."""
    processes = launch(case, trainer, job_id, workdir)
    chief, rest = processes[0], processes[1:]
    servers = [
        p
        for p, (role, _) in zip(processes, case.roles(), strict=True)
        if case.strategy == "parameter_server" and role != "chief"
    ]
    try:
        code = chief.wait(timeout=TIMEOUT)
        for process in servers:  # a parameter_server cluster serves until stopped
            process.terminate()
        codes = [code] + [p.wait(timeout=TIMEOUT) for p in rest if p not in servers]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
    job_dir = workdir / f"job-{job_id}"
    if any(codes):
        log = (job_dir / "replica-0.log").read_text()[-3000:]
        raise RuntimeError(f"{case.name} with {trainer} failed {codes}:\n{log}")
    warm = int(HP["steps_per_epoch"])
    times = [
        value
        for step, name, value, _, _ in reported(job_dir / "replica-0" / METRICS_FILE)
        if name == "step_time" and step > warm
    ]
    return 1.0 / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--trainers",
        default=",".join(
            name
            for name in ("mlp_digits", "cnn_digits")
            if name in BUILTIN_TRAINERS
            and importlib.util.find_spec(BUILTIN_TRAINERS[name].partition(":")[0])
        ),
    )
    parser.add_argument(
        "--cases",
        default="",
        help="names of the cases to run, separated by ; (a name may hold a comma); "
        "default: all, with their baselines",
    )
    args = parser.parse_args()
    trainers = [name for name in args.trainers.split(",") if name]
    wanted = {name.strip() for name in args.cases.split(";") if name.strip()}
    cases = [
        case
        for case in CASES
        if not wanted
        or case.name in wanted
        or any(case.name == other.baseline for other in CASES if other.name in wanted)
    ]

    speeds: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        job_id = 0
        for run in range(args.runs):
            for trainer in trainers:
                for case in cases:
                    job_id += 1
                    speed = run_case(case, trainer, job_id, workdir)
                    speeds.setdefault((trainer, case.name), []).append(speed)
                    print(
                        f"run {run + 1} {trainer:12} {case.name:34} {speed:7.1f} steps/s",
                        flush=True,
                    )

    print(
        f"\nmachine: {platform.node()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; {args.runs} interleaved runs; "
        f"{HP['epochs']} epochs x {HP['steps_per_epoch']} steps, batch_size {HP['batch_size']} "
        "per replica; medians after the first epoch"
    )
    by_name = {case.name: case for case in cases}
    for trainer in trainers:
        print(
            f"\n{trainer}\n| case | steps/s | examples/s | vs | ratio (examples/s) |\n"
            "|---|---|---|---|---|"
        )
        for name, case in by_name.items():
            steps = statistics.median(speeds[(trainer, name)])
            rate = steps * case.examples_per_step()
            base = case.baseline if case.baseline in by_name and case.baseline != name else None
            ratio = "1.00"
            if base:  # the median of the runs' ratios: each run's cases ran side by side
                ratio = f"{statistics.median(ratios(speeds, trainer, case, by_name[base])):.2f}"
            print(f"| {name} | {steps:.1f} | {rate:.0f} | {base or name} | {ratio} |")


def ratios(
    speeds: dict[tuple[str, str], list[float]], trainer: str, case: Case, base: Case
) -> list[float]:
    """Each run's examples/s of `case` over its baseline's in the same run."""
    return [
        (ours * case.examples_per_step()) / (theirs * base.examples_per_step())
        for ours, theirs in zip(
            speeds[(trainer, case.name)], speeds[(trainer, base.name)], strict=True
        )
    ]


if __name__ == "__main__":
    main()
