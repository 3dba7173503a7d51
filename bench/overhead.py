"""Overhead of Cohort over a hand launch of a plain script: the same 2-replica
MultiWorkerMirroredStrategy MLP (3 epochs x 50 steps), side by side in one run.

(H) by hand: two `python bench/plain_mlp.py` processes with TF_CONFIG on loopback ports,
    a script that imports no Cohort code (TensorFlow, tf_keras, NumPy, scikit-learn);
(T) a `trainer` job: POST /api/v1/jobs to a running stack (PostgreSQL, Redis, api,
    scheduler, one agent) with the trainer `plain_mlp:train` of a bundle holding that
    same file: the same `run()`, with the strategy Cohort's runner built and
    `ctx.callbacks()` (Cohort's metrics callback) added;
(P) a `command` job of the same bundle: `python plain_mlp.py --out -`, the hand side's
    very script with Cohort's TF_CONFIG, which prints its timings to its log;
(Q) with `--sides HTQP`: side T without Cohort's callbacks (`plain_mlp:train_quiet`), no
    metric point per step: what T's per-step points cost shows beside it.

Every side times itself with the same code (bench/plain_mlp.py says how; nothing per step
on either side): "first step" runs from the spawn (H) or the POST (T, P) to when the later
of the two replicas finished its first step; "steady step" is the mean over the replicas
of (end of the last epoch - start of epoch 2) / its steps (100 by default, `--epochs`
and `--steps` for a longer window); "done" runs to when both processes
exited (H) or to the job's `finished_at` (T, P: when Cohort recorded it succeeded; the
client polls once a second, so that its own requests cost the replicas nothing). Rounds run
H, T, P in an order rotated each round, after a warm-up round; before each side the
machine is let go quiet (under 15 % of its CPUs busy over a second) and the agent's warm
pool full (its ready processes as many as its size asks: workers/node/pool_size.py).
Reported: each of T/H and P/H per round, and their medians (never a ratio of medians);
per job, the CPU of the stack's own processes and of every PostgreSQL process on the
machine (the stack's database sessions; nothing else should use the server meanwhile).

`--pool auto|N` starts the stack with COHORT_REPLICA_POOL_SIZE (auto, the default: one
warm process per free slot; 0 = none).

The stack's database is a fresh one on the PostgreSQL server of `--pg`, dropped at
the end; its data directory (the bundle store) is a fresh temporary one, and its Redis
the stack's own redis-server unless `--redis` names a database to empty and use.

    .venv/bin/python bench/overhead.py [--runs 5] [--pool auto] [--epochs 3 --steps 50] \\
        [--pg postgresql+psycopg://postgres@127.0.0.1:5432/postgres] \\
        [--redis redis://127.0.0.1:6379/15]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
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
from workers import layout  # noqa: E402

SCRIPT = ROOT / "bench" / "plain_mlp.py"
TRAINERS = {"T": "plain_mlp:train", "Q": "plain_mlp:train_quiet"}  # the trainer job sides
EPOCHS, STEPS = 3, 50
TIMEOUT = 300.0
SLOTS = 2  # the stack's agent's (COHORT_NODE_SLOTS' default)
QUIET = 0.15  # a side starts once under this share of the CPUs is busy


def hand_launch(run: int, workdir: Path, epochs: int, steps: int) -> dict[str, float]:
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
        argv = [sys.executable, str(SCRIPT), "--out", str(out / f"timing-{index}.json")]
        processes.append(
            subprocess.Popen(
                [*argv, "--epochs", str(epochs), "--steps", str(steps)],
                env={**env, "TF_CONFIG": json.dumps(tf_config)},
                cwd=out,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        log.close()
    codes = [p.wait(TIMEOUT) for p in processes]
    done = time.time()
    if codes != [0, 0]:
        tail = (out / "replica-0.log").read_text()[-2000:]
        raise RuntimeError(f"hand launch failed {codes}:\n{tail}")
    timings = [json.loads((out / f"timing-{i}.json").read_text()) for i in range(2)]
    return {
        "first step": max(t["bench_first_step"] for t in timings) - t0,
        "steady step": statistics.fmean(t["bench_steady_step"] for t in timings),
        "done": done - t0,
    }


def job_spec(
    run: int, digest: str, side: str, epochs: int = EPOCHS, steps: int = STEPS
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": f"bench-overhead-{side}-{run}",
        "bundle": digest,
        "replicas": 2,
        "strategy": "multi_worker_mirrored",
        "restart_policy": "never",
    }
    if side in TRAINERS:
        hp = {"epochs": epochs, "steps_per_epoch": steps}
        return {**spec, "trainer": TRAINERS[side], "hyperparameters": hp}
    argv = ["--out", "-", "--epochs", str(epochs), "--steps", str(steps)]
    return {**spec, "command": ["python", SCRIPT.name, *argv]}


def cpu_seconds(pid: int | str) -> tuple[str, float]:
    """Process `pid`'s name and the CPU-seconds it has used (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            raw = handle.read()
    except OSError:
        return "", 0.0
    name, fields = raw.split("(", 1)[1].rsplit(")", 1)[0], raw.rsplit(")", 1)[1].split()
    return name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime+stime


def stack_cpu(stack: Stack) -> float:
    """CPU-seconds the stack's own processes (api, scheduler, agent, Redis; not the
    replicas, which are no children they wait for) have used so far."""
    return sum(cpu_seconds(process.pid)[1] for _name, process in stack.children)


def postgres_cpu() -> float:
    """CPU-seconds every PostgreSQL process of the machine has used so far (a session
    that ended meanwhile is not counted: the stack's are long-lived)."""
    used = (cpu_seconds(pid) for pid in os.listdir("/proc") if pid.isdigit())
    return sum(seconds for name, seconds in used if name in ("postgres", "postmaster"))


def cohort_launch(
    run: int, stack: Stack, client: Client, digest: str, side: str, epochs: int, steps: int
) -> dict[str, float]:
    """The same script as a 2-replica job through the REST API: its `train` as a
    `trainer` (side T), or itself as a `python` command (side P)."""
    cpu0, pg0 = stack_cpu(stack), postgres_cpu()
    t0 = time.time()
    job = client.submit(job_spec(run, digest, side, epochs, steps))
    deadline = time.monotonic() + TIMEOUT
    while job["status"] not in TERMINAL_STATUSES:
        if time.monotonic() > deadline:
            client.cancel(job["id"])
            raise RuntimeError(f"job {job['id']} did not finish in {TIMEOUT:.0f}s")
        # Seldom: a client polling every 50 ms cost the replicas ~10 % of a core of the
        # api's time, which the hand side never pays; "done" is the job's own record.
        time.sleep(1.0)
        job = client.job(job["id"])
    done = stamp(job["finished_at"])
    elapsed = time.time() - t0
    stack_share = (stack_cpu(stack) - cpu0) / elapsed  # of one core, per job
    postgres_share = (postgres_cpu() - pg0) / elapsed
    if job["status"] != "succeeded":
        raise RuntimeError(f"job {job['id']} {job['status']}: {job['reason']}")
    timings = replica_timings(client, job["id"], side)
    first = [t["bench_first_step"] for t in timings]
    steady = [t["bench_steady_step"] for t in timings]
    warm = sum("cohort: warm replica: process" in line.line for line in client.logs(job["id"]))
    events = {e["to_status"]: stamp(e["created_at"]) for e in client.events(job["id"])}
    spawned = max(stamp(r["started_at"]) for r in job["replica_list"])
    return {
        "first step": max(first) - t0,
        "steady step": statistics.fmean(steady),
        "done": done - t0,
        "warm replicas": warm,
        "stack cpu": stack_share,
        "postgres cpu": postgres_share,
        "submit -> scheduled": events["scheduled"] - t0,
        "scheduled -> spawned": spawned - events["scheduled"],
        "spawned -> first step": max(first) - spawned,
    }


TIMINGS = ("bench_first_step", "bench_train_end", "bench_steady_step")


def replica_timings(client: Client, job_id: int, side: str) -> list[dict[str, float]]:
    """Each replica's timings (plain_mlp.run's): a trainer job's are its result's metric
    points, a command job's the BENCH_TIMING line it printed."""
    if side in TRAINERS:
        by_replica: dict[int, dict[str, float]] = {}
        for point in client.metrics(job_id, name=list(TIMINGS)):
            by_replica.setdefault(point["replica"], {})[point["name"]] = point["value"]
        timings = list(by_replica.values())
    else:
        timings = [
            json.loads(line.line.split(" ", 1)[1])
            for line in client.logs(job_id)
            if line.line.startswith("BENCH_TIMING ")
        ]
    if len(timings) != 2 or any(set(TIMINGS) - set(t) for t in timings):
        raise RuntimeError(f"job {job_id}: timings of {len(timings)} replicas, expected 2")
    return timings


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


def cpu_busy(seconds: float = 1.0) -> float:
    """The share of all CPUs busy over `seconds` (/proc/stat)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as handle:
            values = [int(v) for v in handle.readline().split()[1:]]
        idle = values[3] + values[4]  # idle, iowait
        return sum(values) - idle, sum(values)

    busy0, total0 = sample()
    time.sleep(seconds)
    busy1, total1 = sample()
    return (busy1 - busy0) / max(1, total1 - total0)


def ready_warm(data_dir: Path) -> int:
    """The agent's warm processes ready and not yet handed a replica: they said so in
    the pool's log and still sit in the pool's directory."""
    dirs = layout.pool_dirs(data_dir)
    try:
        said = set(re.findall(r"warm process (\d+) ready", dirs.log_file.read_text()))
    except OSError:
        return 0
    count = 0
    for pid in said:
        try:
            count += os.readlink(f"/proc/{pid}/cwd") == str(dirs.root.resolve())
        except OSError:
            continue
    return count


def settle(data_dir: Path, pool: int) -> None:
    """Wait (up to 3 min) for the warm pool to hold `pool` ready processes and the
    machine to be quiet, so that every side starts from the same state."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if ready_warm(data_dir) >= pool and cpu_busy() < QUIET:
            return
    print(f"  (not settled after 3 min: {ready_warm(data_dir)} warm ready)", flush=True)


TITLES = {"H": "hand", "T": "trainer job", "Q": "trainer job, no callbacks", "P": "command job"}


def table(sides: dict[str, list[dict[str, float]]]) -> None:
    med = statistics.median
    hand = sides["H"]
    print(f"| median of {len(hand)} | " + " | ".join(f"{TITLES[s]} ({s})" for s in sides) + " |")
    print("|---" * (len(sides) + 1) + "|")
    for key, unit, scale in (
        ("first step", "s", 1.0),
        ("steady step", "ms", 1e3),
        ("done", "s", 1.0),
    ):
        cells = [f"{med(r[key] for r in sides[s]) * scale:.2f} {unit}" for s in sides]
        print(f"| {key} | " + " | ".join(cells) + " |")
    for side in (s for s in sides if s != "H"):
        for key in ("first step", "steady step", "done"):
            ratios = [c[key] / h[key] for h, c in zip(hand, sides[side], strict=True)]
            print(
                f"{side} / H per round, {key}: "
                + ", ".join(f"{r:.3f}" for r in ratios)
                + f" (median {med(ratios):.3f})"
            )
        warm = [int(r["warm replicas"]) for r in sides[side]]
        print(f"{side}: warm replicas per round {warm}")
        for key, what in (("stack cpu", "the stack's own"), ("postgres cpu", "PostgreSQL's")):
            share = [r[key] * 100 for r in sides[side]]
            print(
                f"{side}: {what} CPU over the job, % of a core: "
                + ", ".join(f"{x:.1f}" for x in share)
                + f" (median {med(share):.1f})"
            )
        print(
            f"{side}: Cohort's launch path (median): "
            + ", ".join(
                f"{key} {med(r[key] for r in sides[side]):.3f} s"
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
        "COHORT_REPLICA_POOL_SIZE": args.pool,
    }
    return {key: str(value) for key, value in settings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    # More steps measure the steady step over a longer window (the default's is 100
    # steps, about 1.5 s: a second's periodic work of the stack falls in it or not).
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="epochs of every side")
    parser.add_argument("--steps", type=int, default=STEPS, help="steps of each epoch")
    parser.add_argument(
        "--pool",
        default="auto",
        help="COHORT_REPLICA_POOL_SIZE of the stack's agent (auto: one per free slot; 0: none)",
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
    parser.add_argument(
        "--sides",
        default="HTP",
        help="the sides to run, H first (HTQP adds Q, the trainer without callbacks)",
    )
    args = parser.parse_args()
    if not args.sides.startswith("H") or set(args.sides) - set(TITLES):
        parser.error(f"--sides: H first, then any of {''.join(TITLES)[1:]}")
    pool = SLOTS if args.pool == "auto" else int(args.pool)  # what the agent keeps idle
    sides: dict[str, list[dict[str, float]]] = {side: [] for side in args.sides}
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
                turn = run % len(args.sides)
                order = args.sides[turn:] + args.sides[:turn]
                got: dict[str, dict[str, float]] = {}
                for side in order:
                    settle(stack.settings.data_dir, pool)
                    got[side] = (
                        hand_launch(run, workdir, args.epochs, args.steps)
                        if side == "H"
                        else cohort_launch(
                            run, stack, client, digest, side, args.epochs, args.steps
                        )
                    )
                print(
                    f"{'warm-up' if run == 0 else f'round {run}'} ({order}): "
                    + " | ".join(
                        f"{side} first step {got[side]['first step']:.2f} s, steady "
                        f"{got[side]['steady step'] * 1e3:.2f} ms, done {got[side]['done']:.2f} s"
                        for side in args.sides
                    ),
                    flush=True,
                )
                if run:
                    for side in args.sides:
                        sides[side].append(got[side])
        finally:
            stack.stop()
            drop_database(args.pg, database)
    print(
        f"\n# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; 2 replicas x "
        f"{args.epochs} epochs x {args.steps} steps; pool {args.pool}; "
        f"{args.runs} interleaved rounds"
    )
    table(sides)


if __name__ == "__main__":
    main()
