"""Overhead of Cohort over a hand launch of the same 2-replica MultiWorkerMirroredStrategy job.

(a) by hand: two `python -m workers.replica.runner` processes with TF_CONFIG, started directly;
(b) through Cohort: POST /api/v1/jobs to a local stack (embedded SQLite + Redis, one agent).
Runs are interleaved (a, b, a, b, ...) so machine noise hits both alike. Time to first
step is the wall time from launch (the spawn, or the POST) to the first step's metric,
as stamped by the replica itself; completion is until the last process exited (a) or
the job was recorded as succeeded (b).

    .venv/bin/python bench/overhead.py [--runs 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.client import CohortClient  # noqa: E402
from cli.stack import Stack  # noqa: E402
from services.statuses import TERMINAL_STATUSES  # noqa: E402
from services.wire.keys import METRICS_STREAM  # noqa: E402
from services.wire.replica import ReplicaLaunch, ReplicaSpec  # noqa: E402

HP = {"epochs": 3, "steps_per_epoch": 20, "batch_size": 32, "learning_rate": 0.01}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spec_file(job_dir: Path, index: int, run: int) -> Path:
    """The spec file the agent would write for replica `index` of the hand-launched job."""
    spec = ReplicaSpec(1_000_000 + run, 1, index, 2, "mlp_digits", "multi_worker_mirrored", HP)
    path = job_dir / f"replica-{index}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ReplicaLaunch(spec, job_dir.absolute()).encode())
    return path


def hand_launch(run: int, workdir: Path, redis_url: str) -> tuple[float, float]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.delete(METRICS_STREAM)
    ports = [free_port(), free_port()]
    cluster = [f"127.0.0.1:{p}" for p in ports]
    job_dir = workdir / f"hand-{run}"
    t0 = time.time()
    processes = []
    for index in range(2):
        env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "COHORT_REDIS_URL": redis_url,
               "TF_CONFIG": json.dumps({"cluster": {"worker": cluster},
                                        "task": {"type": "worker", "index": index}}),
               "COHORT_REPLICA_SPEC": str(spec_file(job_dir, index, run))}
        processes.append(subprocess.Popen([sys.executable, "-m", "workers.replica.runner"], env=env,
                                          cwd=ROOT, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
    codes = [p.wait() for p in processes]
    done = time.time()
    if codes != [0, 0]:
        raise RuntimeError(f"hand launch failed: {codes}")
    first = min(point[4] for _id, fields in client.xrange(METRICS_STREAM)
                for point in json.loads(fields["data"])["points"] if point[0] == 1)
    return first - t0, done - t0


def cohort_launch(run: int, client: CohortClient) -> tuple[float, float, dict[str, float]]:
    t0 = time.time()
    job = client.submit({"name": f"bench-{run}", "replicas": 2, "hyperparameters": HP})
    while job["status"] not in TERMINAL_STATUSES:
        time.sleep(0.05)
        job = client.job(job["id"])
    if job["status"] != "succeeded":
        raise RuntimeError(f"job failed: {job['reason']}")
    points = client.metrics(job["id"], name=["loss"])
    first = min(p["ts"] for p in points if p["step"] == 1)
    finished = dt.datetime.fromisoformat(job["finished_at"]).timestamp()
    events = {e["to_status"]: dt.datetime.fromisoformat(e["created_at"]).timestamp()
              for e in client.events(job["id"])}
    spawned = max(dt.datetime.fromisoformat(r["started_at"]).timestamp()
                  for r in job["replica_list"])
    parts = {"submit->scheduled": events["scheduled"] - t0,
             "scheduled->spawned": spawned - events["scheduled"],
             "spawned->first step": first - spawned}
    return first - t0, finished - t0, parts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        stack = Stack({"COHORT_DATA_DIR": str(workdir / "var"), "COHORT_DATABASE_URL": "",
                       "COHORT_REDIS_URL": "", "COHORT_API_PORT": str(free_port())}, quiet=True)
        stack.start()
        try:
            client = CohortClient(stack.url, stack.token)
            # db 1 of the same Redis: nothing ingests it, the bench reads it directly
            hand_redis = stack.settings.redis_url.rsplit("/", 1)[0] + "/1"
            hand: list[tuple[float, float]] = []
            cohort: list[tuple[float, float]] = []
            parts: list[dict[str, float]] = []
            for run in range(args.runs):
                hand.append(hand_launch(run, workdir, hand_redis))
                first, done, breakdown = cohort_launch(run, client)
                cohort.append((first, done))
                parts.append(breakdown)
                print(f"run {run + 1}: hand first step {hand[-1][0]:.2f}s done {hand[-1][1]:.2f}s"
                      f" | cohort first step {first:.2f}s done {done:.2f}s", flush=True)
        finally:
            stack.stop()
    med = statistics.median
    hf, hd = med(h[0] for h in hand), med(h[1] for h in hand)
    cf, cd = med(c[0] for c in cohort), med(c[1] for c in cohort)
    print(f"\nmachine: {platform.node()} {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; {args.runs} interleaved runs each; "
          f"job: 2 replicas x {HP['epochs']} epochs x {HP['steps_per_epoch']} steps")
    print(f"{'':22}{'hand (a)':>10}{'cohort (b)':>12}{'b - a':>9}{'b / a':>8}")
    print(f"{'time to first step':22}{hf:>9.2f}s{cf:>11.2f}s{cf - hf:>8.2f}s{cf / hf:>8.2f}")
    print(f"{'time to completion':22}{hd:>9.2f}s{cd:>11.2f}s{cd - hd:>8.2f}s{cd / hd:>8.2f}")
    print("cohort breakdown (median):")
    for key in parts[0]:
        print(f"  {key:22}{med(p[key] for p in parts):.3f}s")


if __name__ == "__main__":
    main()
