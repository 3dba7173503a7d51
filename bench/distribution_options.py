"""Distribution options side by side: mixed precision on/off and gradient accumulation
k=1 vs k=4, for the built-in MLP (`mlp_digits`) and CNN (`cnn_digits`).

Each run is one `python -m workers.replica.runner` process (one_device, no control
plane) from a spec file, its metrics read back from Redis. Variants are interleaved
(baseline, bf16, k=4, baseline, ...) so machine noise hits them alike. A run's speed is
the median of its `step_time` points after the first epoch (warm-up and tracing left
out); a step is one batch of `batch_size` examples, so with k=4 it is a micro-step and
the optimizer steps 4 times less often.

    .venv/bin/python bench/distribution_options.py [--runs 3] [--redis redis://127.0.0.1:6379/0]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from services.wire.keys import METRICS_STREAM  # noqa: E402
from services.wire.replica import DistributionOptions, ReplicaLaunch, ReplicaSpec  # noqa: E402

HP = {"epochs": 3, "steps_per_epoch": 40, "batch_size": 64}
VARIANTS: dict[str, DistributionOptions] = {
    "baseline (float32, k=1)": DistributionOptions(),
    "mixed_bfloat16": DistributionOptions(mixed_precision="mixed_bfloat16"),
    "accumulation k=4": DistributionOptions(gradient_accumulation_steps=4),
}
TRAINERS = ("mlp_digits", "cnn_digits")


def run_once(
    job_id: int, trainer: str, distribution: DistributionOptions, workdir: Path, redis_url: str
) -> tuple[float, float]:
    """(steps/s after the first epoch, eval_accuracy) of one one_device run."""
    job_dir = workdir / f"job-{job_id}"
    job_dir.mkdir(parents=True)
    spec = ReplicaSpec(job_id, 1, 0, 1, trainer, "one_device", HP, distribution=distribution)
    spec_path = job_dir / "spec.json"
    spec_path.write_text(ReplicaLaunch(spec, job_dir).encode())
    env = {
        **os.environ,
        "TF_USE_LEGACY_KERAS": "1",
        "COHORT_REDIS_URL": redis_url,
        "COHORT_REPLICA_SPEC": str(spec_path),
        "CUDA_VISIBLE_DEVICES": "",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    env.pop("TF_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "workers.replica.runner"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{trainer} {distribution} failed:\n{done.stderr[-3000:]}")
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    step_times, accuracy = [], float("nan")
    for _id, fields in client.xrange(METRICS_STREAM):
        batch = json.loads(fields["data"])
        if batch["job_id"] != job_id:
            continue
        for step, _epoch, name, value, _ts in batch["points"]:
            if name == "step_time" and step > HP["steps_per_epoch"]:
                step_times.append(value)
            elif name == "eval_accuracy":
                accuracy = value
    client.close()
    return 1.0 / statistics.median(step_times), accuracy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--redis", default=os.environ.get("COHORT_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    args = parser.parse_args()
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    job_id = 2_000_000
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for trainer in TRAINERS:
                for name, distribution in VARIANTS.items():
                    job_id += 1
                    speed, accuracy = run_once(job_id, trainer, distribution, Path(tmp), args.redis)
                    results.setdefault((trainer, name), []).append((speed, accuracy))
                    print(
                        f"run {run + 1} {trainer:10} {name:24} {speed:7.1f} steps/s "  # noqa: T201
                        f"eval_accuracy {accuracy:.3f}",
                        flush=True,
                    )

    print(
        f"\n{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "  # noqa: T201
        f"{os.cpu_count()} CPUs, {args.runs} runs each, one_device, "
        f"batch {HP['batch_size']}, median step after epoch 1\n"
    )
    print(
        "| trainer | variant | steps/s (median of runs) | vs. baseline, per run | "  # noqa: T201
        "vs. baseline (median) | eval_accuracy |"
    )
    print("|---|---|---|---|---|---|")  # noqa: T201
    for trainer in TRAINERS:
        base = [s for s, _ in results[(trainer, next(iter(VARIANTS)))]]
        for name in VARIANTS:
            rows: list[Any] = results[(trainer, name)]
            # Each run's ratio to the baseline run next to it: noise between runs cancels.
            ratios = [s / b for (s, _), b in zip(rows, base, strict=True)]
            speed = statistics.median(s for s, _ in rows)
            accuracy = statistics.median(a for _, a in rows)
            print(
                f"| {trainer} | {name} | {speed:.1f} | "  # noqa: T201
                f"{', '.join(f'{r:.2f}' for r in ratios)} | "
                f"{statistics.median(ratios):.2f}x | {accuracy:.3f} |"
            )


if __name__ == "__main__":
    main()
