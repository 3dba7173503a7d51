"""Overhead of Cohort over a hand launch of a plain script: the same 2-replica
MultiWorkerMirroredStrategy MLP (3 epochs x 50 steps), side by side in one run.

(H) by hand: two `python bench/plain_mlp.py` processes with TF_CONFIG on loopback ports,
    a script that imports no Cohort code (TensorFlow, tf_keras, NumPy, scikit-learn);
(C) through Cohort: POST /api/v1/jobs to a running stack (PostgreSQL, Redis, api,
    scheduler, one agent) with the trainer `plain_mlp:train` of a bundle holding that
    same file: the same `run()`, with the strategy Cohort's runner built and
    `ctx.callbacks()` (Cohort's metrics callback) added.

Both sides time themselves with the same code (bench/plain_mlp.py says how; nothing
per step on either side): "launch -> first step" runs from the spawn (H) or the POST
(C) to when the later of the two replicas finished its first step; "steady step" is
the mean over the replicas of (end of epoch 3 - start of epoch 2) / 100 steps. Cohort's
side reports them as its final metrics, read back through the API. Runs are
interleaved H, C, H, C... after one warm-up pair, medians over the runs; the table
gives C / H.

`--pool N` starts the stack with COHORT_REPLICA_POOL_SIZE=N (warm replica processes
per node; 0 = none).

The stack's database is a fresh one on the PostgreSQL server of `--pg`, dropped at
the end; its data directory (the bundle store) is a fresh temporary one, and its Redis
the stack's own redis-server unless `--redis` names a database to empty and use.

    .venv/bin/python bench/overhead.py [--runs 3] [--pool 0] \\
        [--pg postgresql+psycopg://postgres@127.0.0.1:5432/postgres] \\
        [--redis redis://127.0.0.1:6379/15]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pg import DEFAULT_SERVER, drop_database, new_database  # noqa: E402
from cli.stack import Stack  # noqa: E402
from cohort.bundles import pack  # noqa: E402
from cohort.client import Client  # noqa: E402
from services.statuses import TERMINAL_STATUSES  # noqa: E402
from tests.e2e.conftest import free_port  # noqa: E402

SCRIPT = ROOT / "bench" / "plain_mlp.py"
EPOCHS, STEPS = 3, 50
TIMEOUT = 300.0


def hand_launch(run: int, workdir: Path) -> dict[str, float]:
    """Two plain processes with TF_CONFIG, as one would start them by hand."""
    cluster = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    out = workdir / f"hand-{run}"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["TF_USE_LEGACY_KERAS"] = "1"  # as the agent sets it for every replica
    t0 = time.time()
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}}
        log = open(out / f"replica-{index}.log", "wb")  # noqa: SIM115 - the child owns it
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(SCRIPT),
                    "--out",
                    str(out / f"timing-{index}.json"),
                    "--epochs",
                    str(EPOCHS),
                    "--steps",
                    str(STEPS),
                ],
                env={**env, "TF_CONFIG": json.dumps(tf_config)},
                cwd=out,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        log.close()
    codes = [p.wait(TIMEOUT) for p in processes]
    if codes != [0, 0]:
        tail = (out / "replica-0.log").read_text()[-2000:]
        raise RuntimeError(f"hand launch failed {codes}:\n{tail}")
    timings = [json.loads((out / f"timing-{i}.json").read_text()) for i in range(2)]
    return {
        "first step": max(t["bench_first_step"] for t in timings) - t0,
        "steady step": statistics.fmean(t["bench_steady_step"] for t in timings),
    }


def cohort_launch(run: int, client: Client, digest: str) -> dict[str, float]:
    """The same script's `train` as a 2-replica job through the REST API."""
    t0 = time.time()
    job = client.submit(
        {
            "name": f"bench-overhead-{run}",
            "bundle": digest,
            "trainer": "plain_mlp:train",
            "replicas": 2,
            "strategy": "multi_worker_mirrored",
            "restart_policy": "never",
            "hyperparameters": {"epochs": EPOCHS, "steps_per_epoch": STEPS},
        }
    )
    deadline = time.monotonic() + TIMEOUT
    while job["status"] not in TERMINAL_STATUSES:
        if time.monotonic() > deadline:
            client.cancel(job["id"])
            raise RuntimeError(f"job {job['id']} did not finish in {TIMEOUT:.0f}s")
        time.sleep(0.05)
        job = client.job(job["id"])
    if job["status"] != "succeeded":
        raise RuntimeError(f"job {job['id']} {job['status']}: {job['reason']}")
    points = client.metrics(job["id"], name=["bench_first_step", "bench_steady_step"])
    first = [p["value"] for p in points if p["name"] == "bench_first_step"]
    steady = [p["value"] for p in points if p["name"] == "bench_steady_step"]
    if len(first) != 2 or len(steady) != 2:
        raise RuntimeError(f"job {job['id']}: timings of {len(first)} replicas, expected 2")
    events = {e["to_status"]: stamp(e["created_at"]) for e in client.events(job["id"])}
    spawned = max(stamp(r["started_at"]) for r in job["replica_list"])
    return {
        "first step": max(first) - t0,
        "steady step": statistics.fmean(steady),
        "submit -> scheduled": events["scheduled"] - t0,
        "scheduled -> spawned": spawned - events["scheduled"],
        "spawned -> first step": max(first) - spawned,
    }


def stamp(value: str) -> float:
    return dt.datetime.fromisoformat(value).timestamp()


def push_script(client: Client, workdir: Path) -> str:
    code = workdir / "code"
    code.mkdir()
    shutil.copy(SCRIPT, code / SCRIPT.name)
    info = pack(code, workdir / "code.tar.gz")
    if not client.has_bundle(info.digest):
        client.upload_bundle(info.digest, workdir / "code.tar.gz")
    return info.digest


def table(hand: list[dict[str, float]], cohort: list[dict[str, float]]) -> None:
    med = statistics.median
    print(f"| median of {len(hand)} | hand (H) | Cohort (C) | C − H | C / H |")
    print("|---|---|---|---|---|")
    for key, unit, scale in (("first step", "s", 1.0), ("steady step", "ms", 1e3)):
        h, c = med(r[key] for r in hand) * scale, med(r[key] for r in cohort) * scale
        label = "launch → first step" if key == "first step" else "steady step"
        print(f"| {label} | {h:.2f} {unit} | {c:.2f} {unit} | {c - h:+.2f} {unit} | {c / h:.3f} |")
    for key in ("first step", "steady step"):
        # Each C beside the H run just before it: the machine's load drifts less
        # within a pair than across the run.
        ratios = [c[key] / h[key] for h, c in zip(hand, cohort, strict=True)]
        print(
            f"C / H per pair, {key}: "
            + ", ".join(f"{r:.3f}" for r in ratios)
            + f" (median {med(ratios):.3f})"
        )
    print(
        "Cohort's launch path (median): "
        + ", ".join(
            f"{key} {med(r[key] for r in cohort):.3f} s"
            for key in ("submit -> scheduled", "scheduled -> spawned", "spawned -> first step")
        )
    )


def stack_settings(args: argparse.Namespace, workdir: Path, database: str) -> dict[str, str]:
    settings: dict[str, Any] = {
        "COHORT_DATA_DIR": str(workdir / "var"),
        "COHORT_DATABASE_URL": database,
        "COHORT_REDIS_URL": args.redis or "",
        "COHORT_API_PORT": str(free_port()),
        "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
        "COHORT_PORT_RANGE_START": os.environ.get("COHORT_TEST_PORT_BASE", "29500"),
        "COHORT_REPLICA_POOL_SIZE": str(args.pool),
    }
    return {key: str(value) for key, value in settings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--pool",
        type=int,
        default=0,
        help="COHORT_REPLICA_POOL_SIZE of the stack's agent (0: no pool)",
    )
    parser.add_argument(
        "--pg",
        default=DEFAULT_SERVER,
        help="a PostgreSQL server (any database of it) to make the stack's on",
    )
    parser.add_argument(
        "--db-prefix",
        default="cohort_bench",
        help="the name of the stack's database starts with this",
    )
    parser.add_argument(
        "--redis",
        default=None,
        help="a Redis database for the stack, EMPTIED first (the claims and "
        "queues of an earlier stack would refuse the new jobs of the same "
        "ids); default: a redis-server of the stack's own",
    )
    args = parser.parse_args()
    hand: list[dict[str, float]] = []
    cohort: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="cohort-bench-overhead-") as scratch:
        workdir = Path(scratch)
        workdir.chmod(0o711)  # replicas of a root agent run as their job's uid
        if args.redis:
            redis.Redis.from_url(args.redis).flushdb()
        database = new_database(args.pg, f"{args.db_prefix}_overhead")
        stack = Stack(stack_settings(args, workdir, database), quiet=True)
        try:
            stack.start()
            client = Client(stack.url, stack.token, timeout=120)
            digest = push_script(client, workdir)
            for run in range(args.runs + 1):  # run 0 warms the page cache and the bundle
                h = hand_launch(run, workdir)
                c = cohort_launch(run, client, digest)
                print(
                    f"{'warm-up' if run == 0 else f'run {run}'}: H first step "
                    f"{h['first step']:.2f} s, steady {h['steady step'] * 1e3:.2f} ms | "
                    f"C first step {c['first step']:.2f} s, steady "
                    f"{c['steady step'] * 1e3:.2f} ms",
                    flush=True,
                )
                if run:
                    hand.append(h)
                    cohort.append(c)
        finally:
            stack.stop()
            drop_database(args.pg, database)
    print(
        f"\n# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; 2 replicas x "
        f"{EPOCHS} epochs x {STEPS} steps; pool {args.pool}; {args.runs} interleaved runs"
    )
    table(hand, cohort)


if __name__ == "__main__":
    main()
