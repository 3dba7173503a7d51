"""Training speed per strategy: the same built-in trainer under each, side by side.

Each case is launched as the node agent would launch it, without the control plane:
`python -m workers.replica.runner` processes with their spec files and a hand-made
TF_CONFIG on loopback ports, reporting to a Redis of the bench's own. A case's speed is
read from the chief's own `step_time` points (replica 0) after its first epoch
(tracing, start-up): steps/s = 1 / median step time, examples/s = steps/s x the
examples one step takes (the global batch: `batch_size` per replica in sync; one
worker's batch under parameter_server, whose workers step independently).
Runs are interleaved (every case once, then again) so machine noise hits all alike;
the figures are medians over the runs, and each case is compared with its baseline
as a ratio of examples/s.

    .venv/bin/python bench/strategies.py [--runs 3] [--trainers mlp_digits,cnn_digits]

A case is one row of CASES: add rows (another distribution option, another
strategy) and they are run and compared like the others.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from services.jobs.trainers import BUILTIN_TRAINERS  # noqa: E402
from services.wire.keys import METRICS_STREAM  # noqa: E402
from tests.e2e.conftest import free_ports  # noqa: E402

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


def tf_configs(case: Case) -> list[dict[str, Any] | None]:
    """Each process's TF_CONFIG (None for a one-process case)."""
    roles = case.roles()
    if len(roles) == 1:
        return [None]
    addresses = [f"127.0.0.1:{port}" for port in free_ports(len(roles))]
    cluster: dict[str, list[str]] = {}
    for (role, _), address in zip(roles, addresses, strict=True):
        cluster.setdefault(role, []).append(address)
    return [{"cluster": cluster, "task": {"type": role, "index": index}} for role, index in roles]


def launch(
    case: Case, trainer: str, job_id: int, workdir: Path, redis_url: str
) -> list[subprocess.Popen[bytes]]:
    """Start the case's processes, as the agent would (spec file, TF_CONFIG)."""
    job_dir = workdir / f"job-{job_id}"
    roles = case.roles()
    processes = []
    for index, ((role, role_index), tf_config) in enumerate(
        zip(roles, tf_configs(case), strict=True)
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
        spec_file = job_dir / f"spec-{index}.json"
        spec_file.parent.mkdir(parents=True, exist_ok=True)
        spec_file.write_text(json.dumps({"spec": spec, "job_dir": str(job_dir)}))
        env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        env.update(
            TF_USE_LEGACY_KERAS="1",
            COHORT_REDIS_URL=redis_url,
            COHORT_REPLICA_SPEC=str(spec_file),
            CUDA_VISIBLE_DEVICES="",
            TF_CPP_MIN_LOG_LEVEL="2",
        )
        if tf_config is not None:
            env["TF_CONFIG"] = json.dumps(tf_config)
        log = open(job_dir / f"replica-{index}.log", "wb")  # noqa: SIM115 - the child owns it
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "workers.replica.runner"],
                env=env,
                cwd=ROOT,
                stdout=log,
                stderr=log,
            )
        )
        log.close()
    return processes


def run_case(case: Case, trainer: str, job_id: int, workdir: Path, client: redis.Redis) -> float:
    """Train once; the chief's steps per second after its first epoch."""
    redis_url = client.connection_pool.connection_kwargs
    url = f"redis://{redis_url['host']}:{redis_url['port']}/0"
    processes = launch(case, trainer, job_id, workdir, url)
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
    if any(codes):
        log = (workdir / f"job-{job_id}" / "replica-0.log").read_text()[-3000:]
        raise RuntimeError(f"{case.name} with {trainer} failed {codes}:\n{log}")
    warm = int(HP["steps_per_epoch"])
    times = [
        value
        for step, name, value in chief_points(client, job_id)
        if name == "step_time" and step > warm
    ]
    return 1.0 / statistics.median(times)


def chief_points(client: redis.Redis, job_id: int) -> list[tuple[int, str, float]]:
    points = []
    for _entry_id, fields in client.xrange(METRICS_STREAM):
        batch = json.loads(fields[b"data"])
        if batch["job_id"] == job_id and batch["replica"] == 0:
            points.extend((step, name, value) for step, _e, name, value, _ts in batch["points"])
    return points


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], redis.Redis]:
    port = free_ports(1)[0]
    server = subprocess.Popen(
        [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(host="127.0.0.1", port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return server, client
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


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
        help="names of the cases to run, comma-separated (default: all, with their baselines)",
    )
    args = parser.parse_args()
    trainers = [name for name in args.trainers.split(",") if name]
    wanted = {name.strip() for name in args.cases.split(",") if name.strip()}
    cases = [
        case
        for case in CASES
        if not wanted
        or case.name in wanted
        or any(case.name == other.baseline for other in CASES if other.name in wanted)
    ]
    if shutil.which("redis-server") is None:
        sys.exit("redis-server is not on PATH")

    speeds: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        server, client = start_redis(workdir)
        try:
            job_id = 0
            for run in range(args.runs):
                for trainer in trainers:
                    for case in cases:
                        job_id += 1
                        speed = run_case(case, trainer, job_id, workdir, client)
                        speeds.setdefault((trainer, case.name), []).append(speed)
                        print(
                            f"run {run + 1} {trainer:12} {case.name:34} {speed:7.1f} steps/s",
                            flush=True,
                        )
        finally:
            client.close()
            server.terminate()
            server.wait()

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
        rate = {
            name: statistics.median(speeds[(trainer, name)]) * case.examples_per_step()
            for name, case in by_name.items()
        }
        for name, case in by_name.items():
            steps = statistics.median(speeds[(trainer, name)])
            base = case.baseline if case.baseline in rate and case.baseline != name else None
            ratio = f"{rate[name] / rate[base]:.2f}" if base else "1.00"
            print(f"| {name} | {steps:.1f} | {rate[name]:.0f} | {base or name} | {ratio} |")


if __name__ == "__main__":
    main()
