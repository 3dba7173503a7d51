"""The stack's own CPU while replicas train: what Cohort's processes spend per job.

A stack (`cli.stack.Stack`: api, scheduler, one agent, its Redis; PostgreSQL is the
server of `--pg`) is started, left idle for `--idle` seconds, then runs one 2-replica
MultiWorkerMirroredStrategy job of bench/plain_mlp.py, long enough to train for about
`--epochs` x `--steps` steps: (`--jobs`) as a `python plain_mlp.py` command job, P; its
`train` as a `trainer` job, T, whose callbacks record metric points every step; or that
trainer without those callbacks, Q. Every process of the stack is read from /proc every
0.5 s (user + system CPU): the api, the scheduler, the agent, Redis, and the PostgreSQL
server processes serving the stack's database. Reported, as % of one core:

* idle: over the idle window, no job (what the stack costs to exist: its periodic passes,
  heartbeats, polls);
* training: from 1 s after the later replica's first step to 0.5 s before the earlier
  replica's fit returned (each replica reports both times; the agent's warm processes do
  not refill meanwhile: its slots are busy);
* per job: training - idle, what one running job adds (its progress, points, logs, the
  agent's following of its replicas).

The replicas' own CPU is not the stack's and is not counted.

Sides, each a fresh stack, interleaved round by round (the order rotated): each `--jobs`
kind under each `--interval` value of COHORT_SCHEDULER_INTERVAL (`default`: the stack's
own default), on this checkout and, with `--against DIR`, on another (the commit before,
say): the bench copies its own files (BENCH_FILES) into DIR/bench, and each round runs as
a child process in its checkout, so the stack's processes import that checkout's code. The
median of each side's rounds, and the per-round ratios of each side to the first, with
their median.

    .venv/bin/python bench/stack_cpu.py [--rounds 3] [--interval 1,default] [--idle 20] \
        [--jobs P,T,Q] [--against /tmp/before] [--profile DIR]

`--profile DIR`: py-spy's stacks of the api, the scheduler and the agent while the job
trains (`--profile-seconds` from `--profile-delay` after it is running), a file each.
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
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.overhead import (  # noqa: E402
    TITLES,
    cpu_seconds,
    job_spec,
    push_script,
    replica_timings,
    stack_settings,
)
from bench.pg import DEFAULT_SERVER, drop_database, new_database  # noqa: E402
from bench.processes import py_spy  # noqa: E402
from cli.stack import Stack  # noqa: E402
from cohort.client import Client  # noqa: E402
from services.statuses import TERMINAL_STATUSES  # noqa: E402

PARTS = ("api", "scheduler", "agent", "redis", "postgres")
# Redis commands counted a second in each window (INFO commandstats): its transactions
# (exec), stream appends and reads (the ingest's), beats (eval, evalsha, hset), the
# agents' and the scheduler's other round trips in `all`.
COUNTED = ("exec", "xadd", "xreadgroup", "eval", "evalsha", "hset")
BENCH_FILES = ("stack_cpu.py", "overhead.py", "plain_mlp.py", "pg.py", "processes.py")
# What a round's child process is told of the parent's arguments.
FORWARDED = ("idle", "settle", "epochs", "steps", "pg", "db_prefix", "profile")
FORWARDED += ("profile_delay", "profile_seconds")


class Meter:
    """The stack's processes' CPU, part by part, read at once; and what they asked of
    Redis and PostgreSQL, counted (COUNTED)."""

    def __init__(self, stack: Stack, database_url: str, server: str) -> None:
        self.stack = stack
        self.database = sa.engine.make_url(database_url).database
        self.admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
        self.redis = redis.Redis.from_url(stack.settings.redis_url)  # the stack's own

    def read(self) -> dict[str, float]:
        cpu = {name: cpu_seconds(process.pid)[1] for name, process in self.stack.children}
        with self.admin.connect() as connection:
            pids = connection.execute(
                sa.text("SELECT pid FROM pg_stat_activity WHERE datname = :name"),
                {"name": self.database},
            ).scalars()
            # Backends come and go: a gone one's CPU is lost from the sum, so the
            # window's figure for PostgreSQL is a lower bound.
            cpu["postgres"] = sum(cpu_seconds(pid)[1] for pid in pids)
            # Committed transactions of the stack's database (PostgreSQL's statistics lag
            # by up to a second: a window's count is good to about one).
            cpu["n:sql commits"] = connection.execute(
                sa.text("SELECT xact_commit FROM pg_stat_database WHERE datname = :name"),
                {"name": self.database},
            ).scalar_one()
        stats = self.redis.info("commandstats")
        for command in COUNTED:
            cpu[f"n:{command}"] = stats.get(f"cmdstat_{command}", {}).get("calls", 0)
        return cpu


def share(a: tuple[float, dict[str, float]], b: tuple[float, dict[str, float]]) -> dict[str, float]:
    """% of one core each part used between two readings, and their total; and each
    count's rate a second ("n:..." keys)."""
    (ta, ca), (tb, cb) = a, b
    out = {part: 100 * (cb.get(part, 0.0) - ca.get(part, 0.0)) / (tb - ta) for part in PARTS}
    out["total"] = sum(out.values())
    out.update({key: (cb[key] - ca.get(key, 0.0)) / (tb - ta) for key in cb if key[:2] == "n:"})
    return out


def one_round(
    args: argparse.Namespace, interval: str, side: str, workdir: Path
) -> dict[str, dict[str, float]]:
    """A fresh stack with this scheduler interval: its idle and training shares while a
    job of `side` (bench/overhead.py's P, T or Q) trains."""
    database = new_database(args.pg, f"{args.db_prefix}_stack_cpu")
    settings = stack_settings(argparse.Namespace(redis=None, pool="auto"), workdir, database)
    if interval != "default":
        settings["COHORT_SCHEDULER_INTERVAL"] = interval
    stack = Stack(settings, quiet=True)
    try:
        stack.start()
        meter = Meter(stack, database, args.pg)
        client = Client(stack.url, stack.token, timeout=120)
        digest = push_script(client, workdir)
        time.sleep(args.settle)  # the warm processes' TensorFlow imports end
        start = (time.time(), meter.read())
        time.sleep(args.idle)
        idle = share(start, (time.time(), meter.read()))
        readings = []
        job = client.submit(job_spec(0, digest, side, args.epochs, args.steps))
        spies: list[subprocess.Popen[bytes]] = []
        while job["status"] not in TERMINAL_STATUSES:
            readings.append((time.time(), meter.read()))
            time.sleep(0.5)
            if len(readings) % 10 == 0:  # the client's own requests: every 5 s
                job = client.job(job["id"])
                if args.profile and job["status"] == "running" and not spies:
                    spies = profile(stack, args.profile / f"{side}-{interval}", args)
        for spy in spies:
            spy.wait()
        if job["status"] != "succeeded":
            raise RuntimeError(f"job {job['id']} {job['status']}: {job['reason']}")
        timing = replica_timings(client, job["id"], side)
        begin = max(t["bench_first_step"] for t in timing) + 1.0
        end = min(t["bench_train_end"] for t in timing) - 0.5
        window = [r for r in readings if begin <= r[0] <= end]
        if len(window) < 10:
            raise RuntimeError(f"a training window of {len(window)} readings: more --steps")
        return {"idle": idle, "training": share(window[0], window[-1])}
    finally:
        stack.stop()
        drop_database(args.pg, database)


def profile(stack: Stack, prefix: Path, args: argparse.Namespace) -> list[subprocess.Popen[bytes]]:
    """py-spy recording the stack's processes (PostgreSQL aside) for `--profile-seconds`,
    from `--profile-delay` s on (the replicas past their first steps)."""
    time.sleep(args.profile_delay)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    return [
        py_spy(
            process.pid,
            Path(f"{prefix}-{name}-{process.pid}.txt"),
            args.profile_seconds,
            children=False,
        )
        for name, process in stack.children
        if name != "redis"
    ]


def report(sides: dict[str, list[dict[str, dict[str, float]]]]) -> None:
    med = statistics.median
    print("| side | window | " + " | ".join(PARTS) + " | total |")
    print("|---|---|" + "---|" * (len(PARTS) + 1))
    for side, rounds in sides.items():
        for window in ("idle", "training"):
            cells = [f"{med(r[window][p] for r in rounds):.2f}" for p in (*PARTS, "total")]
            print(f"| {side} | {window} | " + " | ".join(cells) + " |")
        per_job = [r["training"]["total"] - r["idle"]["total"] for r in rounds]
        print(
            f"{side}: per job (training - idle), % of a core: "
            + ", ".join(f"{x:.2f}" for x in per_job)
            + f" (median {med(per_job):.2f})"
        )
        counts = sorted(key for key in rounds[0]["training"] if key[:2] == "n:")
        if counts:  # a checkout whose bench counted nothing prints none
            rates = {
                key[2:]: med(r["training"].get(key, 0.0) - r["idle"].get(key, 0.0) for r in rounds)
                for key in counts
            }
            print(
                f"{side}: per job, a second (training - idle, median): "
                + ", ".join(f"{name} {rate:.1f}" for name, rate in rates.items())
            )
    first, *others = sides
    for side in others:
        for window in ("idle", "training"):
            ratios = [
                b[window]["total"] / a[window]["total"]
                for a, b in zip(sides[first], sides[side], strict=True)
            ]
            print(
                f"{side} / {first} per round, {window} total: "
                + ", ".join(f"{x:.3f}" for x in ratios)
                + f" (median {med(ratios):.3f})"
            )


def child_round(args: argparse.Namespace, tree: Path, interval: str, job: str) -> dict[str, Any]:
    """One round in a child process of checkout `tree`: its figures."""
    argv = [sys.executable, "bench/stack_cpu.py", "--one-round", "--interval", interval]
    argv += ["--jobs", job]
    for flag in FORWARDED:
        if getattr(args, flag) is not None:
            argv += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"a round in {tree} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--interval",
        default="1,default",
        help="COHORT_SCHEDULER_INTERVAL of each side, comma-separated (default: the stack's)",
    )
    parser.add_argument(
        "--jobs",
        default="P",
        help="the job of each side, comma-separated: P a `python plain_mlp.py` command, "
        "T its `train` as a trainer (a metric point per step), Q the trainer without "
        "Cohort's callbacks",
    )
    parser.add_argument("--against", type=Path, help="another checkout: its sides too")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of the idle window")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds before it")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--pg", default=DEFAULT_SERVER)
    parser.add_argument("--db-prefix", default="cohort_bench")
    parser.add_argument(
        "--profile", type=Path, help="a directory for py-spy's stacks of the stack's processes"
    )
    parser.add_argument("--profile-delay", type=float, default=5.0)
    parser.add_argument("--profile-seconds", type=float, default=20.0)
    parser.add_argument("--one-round", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.profile:  # the rounds' children run in their checkouts
        args.profile = args.profile.resolve()
    if args.one_round:  # a child: one round of this checkout, as JSON
        with tempfile.TemporaryDirectory(prefix="cohort-bench-stack-cpu-") as scratch:
            workdir = Path(scratch)
            workdir.chmod(0o711)  # replicas of a root agent run as their job's uid
            print(json.dumps(one_round(args, args.interval, args.jobs, workdir)))
        return
    trees = {}  # the other checkout first: the ratios are this one's to it
    if args.against:
        trees["before"] = args.against.resolve()
        for name in BENCH_FILES:
            shutil.copy(ROOT / "bench" / name, trees["before"] / "bench" / name)
    trees["this"] = ROOT
    sides = {
        f"{tree} interval {interval}, {TITLES[job]}": (path, interval, job)
        for tree, path in trees.items()
        for interval in args.interval.split(",")
        for job in args.jobs.split(",")
    }
    results: dict[str, list[dict[str, dict[str, float]]]] = {side: [] for side in sides}
    for run in range(args.rounds):
        names = list(sides)
        for side in names[run % len(names) :] + names[: run % len(names)]:
            got = child_round(args, *sides[side])
            results[side].append(got)
            print(
                f"round {run + 1} {side}: idle {got['idle']['total']:.2f} %, training "
                f"{got['training']['total']:.2f} % of a core",
                flush=True,
            )
    print(
        f"\n# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; load "
        f"{os.getloadavg()[0]:.1f}; {args.rounds} interleaved rounds, a fresh stack each"
    )
    report(results)


if __name__ == "__main__":
    main()
