"""Sweeps carried out by Optuna: how many trials each algorithm needs, and what asking
Optuna costs the scheduler's pass.

(a) Trials to a target. The toy objective is a bowl, (x - 1)² + (y + 2)² over
    x, y uniform in [-5, 5] (minimised, 0 at its bottom); each algorithm runs sequential
    trials, one at a time, exactly as the pass makes them (the study rebuilt from the
    trials told so far, then asked), until a trial's value is at or under the target;
    several seeds, the median count. Nothing here touches a database: the figures are
    Optuna's, through Cohort's study (services/sweeps/study.py).
(b) A pass that creates 100 trials, on a database, after trials that were told a value
    (tpe then past its 10 random startup trials): one sweep of 120 trials, 20 told, with
    100 free turns (100 asks of one study), and 100 sweeps of 12 trials, 11 told, with one
    free turn each (100 studies built and asked once); random and tpe interleaved, round
    after round, each round on new sweeps. The figure is the sweep part of the pass
    (`advance_sweeps` in its own transaction: the studies, the 100 jobs and rows created;
    as the scheduler runs it, the cycle collector paused and PostgreSQL's JIT off)
    and the Optuna part of it (building the studies or catching up the kept ones, and
    asking them), median over rounds. The pass that created the told trials ran in the
    same process, so `this` finds their studies kept (services/sweeps/study_cache.py),
    as the scheduler that created them would; `this, cold` forgets them first, as a
    scheduler new to the sweeps (after a restart or a failover) would not have them.

(d) With --pg, Cohort's in-memory study against Optuna's own RDBStorage (on a database of
    its own: on Cohort's it refuses to start, its schema check reading Cohort's
    `alembic_version`): a study with 20 trials told, then 100 random asks, each trial's
    sampler seeded as Cohort seeds it; interleaved, median over rounds.

    .venv/bin/python bench/sweeps_optuna.py [--seeds 9] [--target 0.5] [--rounds 5]
        [--pg postgresql+psycopg://postgres@127.0.0.1:5432/postgres]
        [--pass-only] [--against /path/to/other/checkout [--against-python PYTHON]]

`--pass-only` runs (b) alone; `--against DIR` runs (b) only, on this checkout and on DIR
(e.g. a `git worktree` of the commit before) in a second process with a database of its
own, pass for pass in turn (`this`, `this, cold` and `before`, the order turned round
by round, the same sweeps and seeds): each round's ratio to before, and the median of
those per-round ratios.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.samplers import RandomSampler
from optuna.trial import TrialState
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parent.parent
# `--tree DIR`: import Cohort from another checkout (the process `--against` starts).
TREE = Path(sys.argv[sys.argv.index("--tree") + 1]) if "--tree" in sys.argv else ROOT
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(TREE))

from bench.schedules import drop_databases, fresh_database  # noqa: E402
from cli.stack import migrate  # noqa: E402
from services.auth import tokens  # noqa: E402
from services.db import make_engine  # noqa: E402
from services.models import Job, MetricPoint, Sweep, SweepTrial  # noqa: E402
from services.settings import Settings  # noqa: E402
from services.statuses import JobStatus, SweepStatus  # noqa: E402
from services.sweeps import advance, store  # noqa: E402
from services.sweeps.schemas import SweepCreate  # noqa: E402
from services.sweeps.study import StoredTrial, SweepStudy, trial_seed  # noqa: E402
from workers.control.scheduler import cycles_collected_after  # noqa: E402

SPACE = {
    "x": {"distribution": "uniform", "low": -5.0, "high": 5.0},
    "y": {"distribution": "uniform", "low": -5.0, "high": 5.0},
}
# Trials ask for a GPU on a cluster without nodes: they stay queued.
TEMPLATE = {"strategy": "one_device", "replicas": 1, "gpus_per_replica": 1}
LONG_AGO = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def bowl(params: dict[str, Any]) -> float:
    return float((params["x"] - 1) ** 2 + (params["y"] + 2) ** 2)


def spec(algorithm: str, seed: int, trials: int, concurrent: int = 1) -> SweepCreate:
    return SweepCreate.model_validate(
        {
            "name": "bench",
            "template": TEMPLATE,
            "algorithm": algorithm,
            "space": {"random": SPACE, "seed": seed},
            "trials": trials,
            "max_concurrent": concurrent,
            "objective": {"metric": "loss", "mode": "min"},
        }
    )


def judging(rule: dict[str, Any], finished: int, running: int, steps: int) -> float:
    """Seconds to build a study of `finished` trials of `steps` points and `running` ones
    halfway, and ask the pruner about each running one (the pass's judgement)."""
    sweep_in = SweepCreate.model_validate(
        spec("random", 1, finished + running).model_dump(exclude_unset=True)
        | {"early_stopping": rule}
    )
    history = []
    for index in range(finished + running):
        quality = (index * 7919 % 100) / 100
        done = index < finished
        points = {s: quality * s / steps for s in range(1, (steps if done else steps // 2) + 1)}
        state = TrialState.COMPLETE if done else TrialState.RUNNING
        value = points[steps] if done else None
        params = {"x": quality, "y": 0.0}
        history.append(StoredTrial(index, params, {}, state, value, points))
    start = time.perf_counter()
    study = SweepStudy(sweep_id=1, spec=sweep_in, seed=1, trials=history)
    for index in range(finished, finished + running):
        study.should_stop(index)
    return time.perf_counter() - start


def trials_to_target(algorithm: str, seed: int, target: float, cap: int) -> tuple[int, float]:
    """Trials until one is at or under `target` (cap + 1: never), and the seconds per ask."""
    sweep_in = spec(algorithm, seed, cap)
    history: list[StoredTrial] = []
    spent = 0.0
    for index in range(cap):
        start = time.perf_counter()
        study = SweepStudy(sweep_id=1, spec=sweep_in, seed=seed, trials=history)
        params, attrs = study.ask(index)
        spent += time.perf_counter() - start
        value = bowl(params)
        history.append(StoredTrial(index, params, attrs, TrialState.COMPLETE, value))
        if value <= target:
            return index + 1, spent / (index + 1)
    return cap + 1, spent / cap


def rdb_against_memory(url: str, round_: int) -> tuple[float, float]:
    """Seconds for 100 asks after 20 told trials: on RDBStorage at `url`, then in memory
    as the pass does it (the study rebuilt from the 20, then asked 100 times)."""
    sweep_in = spec("random", 1, 120, concurrent=100)
    dists = SweepStudy(sweep_id=0, spec=sweep_in, seed=1, trials=[]).space.distributions
    study = optuna.create_study(
        storage=optuna.storages.RDBStorage(url), study_name=f"r{round_}", direction="minimize"
    )
    history = []
    for index in range(20):
        study.sampler = RandomSampler(seed=trial_seed(1, index))
        trial = study.ask(dists)
        study.tell(trial, bowl(trial.params))
        history.append(
            StoredTrial(index, trial.params, {}, TrialState.COMPLETE, bowl(trial.params))
        )
    start = time.perf_counter()
    for index in range(20, 120):
        study.sampler = RandomSampler(seed=trial_seed(1, index))
        study.ask(dists)
    rdb = time.perf_counter() - start
    start = time.perf_counter()
    memory = SweepStudy(sweep_id=0, spec=sweep_in, seed=1, trials=history)
    for index in range(20, 120):
        memory.ask(index)
    return rdb, time.perf_counter() - start


class Optuna:
    """What the pass spent in Optuna: building its studies, catching up kept ones, asking."""

    spent = 0.0
    timed = False


def time_studies() -> None:
    """Time SweepStudy's own methods, however the checkout builds its studies (one from
    before the study cache has no `catch_up`). Once a process: both sides of this
    checkout share the class."""
    if Optuna.timed:
        return
    Optuna.timed = True
    for name in ("__init__", "ask", "catch_up"):
        method = getattr(SweepStudy, name, None)
        if method is not None:
            setattr(SweepStudy, name, _timed(method))


def _timed(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            Optuna.spent += time.perf_counter() - start

    return timed


def add_sweeps(engine: sa.Engine, algorithm: str, shape: str, seed: int) -> list[int]:
    """Sweeps whose next pass creates 100 trials, after trials told a value (tpe past its
    10 random startup trials): `one`, a sweep of 120 trials with 20 told and 100 free
    turns; `many`, 100 sweeps of 12 trials with 11 told and one free turn each."""
    done, total, concurrent, count = (20, 120, 100, 1) if shape == "one" else (11, 12, 1, 100)
    settings = Settings(QUOTA_MAX_QUEUED_JOBS=None)  # 1,100 trials queued at once
    with Session(engine) as session, session.begin():
        token = tokens.ensure_token(
            session=session,
            token="bench_" + uuid.uuid4().hex,
            project_name="bench",
            name="bench",
            scopes=["read", "submit"],
        )
        ids = [
            store.create_sweep(
                session=session,
                project_id=token.project_id,
                sweep_in=spec(algorithm, seed + s, total, concurrent=done),
                settings=settings,
            ).id
            for s in range(count)
        ]
        # The told trials first, at most `done` a sweep at once, then told.
        advance.advance_sweeps(session=session, settings=settings)
        told = session.execute(
            sa.select(Job, SweepTrial.parameters)
            .join(
                SweepTrial,
                sa.and_(
                    SweepTrial.sweep_id == Job.sweep_id,
                    SweepTrial.trial_index == Job.trial_index,
                ),
            )
            .where(Job.sweep_id.in_(ids))
        ).all()
        assert len(told) == done * count, len(told)
        session.execute(
            sa.insert(MetricPoint),
            [
                {
                    "job_id": job.id,
                    "attempt": job.attempt,
                    "replica": 0,
                    "step": 1,
                    "epoch": None,
                    "name": "loss",
                    "value": bowl(params),
                    "ts": 0.0,
                }
                for job, params in told
            ],
        )
        for job, _ in told:  # ended long enough ago for tpe to ask again
            job.status, job.finished_at = JobStatus.SUCCEEDED, LONG_AGO
        session.execute(sa.update(Sweep).where(Sweep.id.in_(ids)).values(max_concurrent=concurrent))
        return ids


def timed_pass(engine: sa.Engine, ids: list[int]) -> tuple[float, float, int]:
    """The sweep part of one pass: seconds, of which Optuna's, and trials created."""
    Optuna.spent = 0.0
    settings = Settings()  # the scheduler's, made once: not part of its pass
    start = time.perf_counter()
    # As the scheduler runs its pass (workers/control/scheduler.py, services/scheduling/
    # scheduler_pass.py): the cycle collector paused for it, PostgreSQL's JIT off.
    with cycles_collected_after(), Session(engine) as session, session.begin():
        if engine.dialect.name == "postgresql":
            session.execute(sa.text("SET LOCAL jit = off"))
        created = advance.advance_sweeps(session=session, settings=settings).created
    total = time.perf_counter() - start
    with Session(engine) as session, session.begin():  # out of the next round's way
        session.execute(
            sa.update(Sweep).where(Sweep.id.in_(ids)).values(status=SweepStatus.CANCELLED)
        )
        session.execute(
            sa.update(Job).where(Job.sweep_id.in_(ids)).values(status=JobStatus.CANCELLED)
        )
    return total, Optuna.spent, len(created)


SHAPES = ("one", "many")
ALGORITHMS = ("random", "tpe")


class PassSide:
    """One checkout's part (b): a database of its own, a pass timed per request."""

    def __init__(self, pg: str | None, tmp: str, *, cold: bool = False) -> None:
        time_studies()
        self.pg, self.cold = pg, cold
        self.url = fresh_database(pg, Path(tmp), "optuna")
        migrate(self.url)
        self.engine = make_engine(self.url)

    def run(self, shape: str, algorithm: str, seed: int) -> tuple[float, float]:
        """Seconds of the sweep part of a pass creating 100 trials, and Optuna's."""
        ids = add_sweeps(self.engine, algorithm, shape, seed=seed)
        if self.cold:
            from services.sweeps import study_cache

            study_cache.forget()
        total, optuna_part, created = timed_pass(self.engine, ids)
        assert created == 100, (shape, algorithm, created)
        return total, optuna_part

    def close(self) -> None:
        self.engine.dispose()
        drop_databases(self.pg, [self.url])


def serve(args: argparse.Namespace) -> None:
    """The `--against` side: one pass per line read, its seconds written back as JSON."""
    answers, sys.stdout = sys.stdout, sys.stderr  # stdout carries the answers alone
    with tempfile.TemporaryDirectory() as tmp:
        side = PassSide(args.pg, tmp)
        try:
            print(json.dumps({"ready": True}), file=answers, flush=True)
            for line in sys.stdin:
                ask = json.loads(line)
                if ask.get("quit"):
                    break
                total, part = side.run(ask["shape"], ask["algorithm"], ask["seed"])
                print(json.dumps({"total": total, "optuna": part}), file=answers, flush=True)
        finally:
            side.close()


class AgainstSide:
    """Another checkout's part (b), in a process of its own driven pass by pass."""

    def __init__(self, args: argparse.Namespace) -> None:
        command = [args.against_python or sys.executable, str(Path(__file__).resolve())]
        command += ["--serve", "--tree", str(Path(args.against).resolve())]
        command += ["--pg", args.pg] if args.pg else []
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the --against process ended (exit {self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def run(self, shape: str, algorithm: str, seed: int) -> tuple[float, float]:
        assert self.process.stdin is not None
        ask = {"shape": shape, "algorithm": algorithm, "seed": seed}
        self.process.stdin.write(json.dumps(ask) + "\n")
        self.process.stdin.flush()
        answer = self._answer()
        return answer["total"], answer["optuna"]

    def close(self) -> None:
        if self.process.poll() is None and self.process.stdin is not None:
            self.process.stdin.write(json.dumps({"quit": True}) + "\n")
            self.process.stdin.flush()
        self.process.wait()


def pass_rounds(args: argparse.Namespace) -> None:
    """(b), and with --against this checkout cold and the other checkout's (b), pass for
    pass in turn (each side first in turn, the same seeds): medians, per-round ratios to
    the other checkout and their median."""
    kind = "PostgreSQL" if args.pg else "SQLite"
    with tempfile.TemporaryDirectory() as tmp:
        sides: dict[str, Any] = {"this": PassSide(args.pg, tmp)}
        try:
            if args.against:
                sides["this, cold"] = PassSide(args.pg, tmp, cold=True)
                sides["before"] = AgainstSide(args)
            figures: dict[str, dict[tuple[str, str], list[tuple[float, float]]]] = {
                side: {} for side in sides
            }
            for round_ in range(args.rounds):
                for shape in SHAPES:
                    for algorithm in ALGORITHMS:
                        names = list(sides)
                        turn = round_ % len(names)  # each side first in turn
                        for side in names[turn:] + names[:turn]:
                            got = sides[side].run(shape, algorithm, round_ * 1000)
                            figures[side].setdefault((shape, algorithm), []).append(got)
        finally:
            for side in sides.values():
                side.close()
    print(
        f"(b) the sweep part of a pass creating 100 trials, {kind}, {args.rounds} rounds, "
        f"load average {os.getloadavg()[0]:.1f}:"
    )
    for side in (name for name in figures if name != "before"):
        for (shape, algorithm), runs in figures[side].items():
            what = "1 sweep x 100 asks  " if shape == "one" else "100 sweeps x 1 ask  "
            total = statistics.median(t for t, _ in runs) * 1000
            part = statistics.median(o for _, o in runs) * 1000
            line = f"    {side:10} {what} {algorithm:6}: {total:7.1f} ms, Optuna {part:6.1f} ms"
            if "before" in figures:
                theirs = figures["before"][(shape, algorithm)]
                before = statistics.median(t for t, _ in theirs) * 1000
                ratios = [a / b for (a, _), (b, _) in zip(runs, theirs, strict=True)]
                line += (
                    f"; before {before:7.1f} ms; /before per round "
                    f"{' '.join(f'{r:.3f}' for r in ratios)}, "
                    f"median {statistics.median(ratios):.3f}"
                )
            print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=9)
    parser.add_argument("--target", type=float, default=0.5)
    parser.add_argument("--cap", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pg", default=None, help="PostgreSQL admin URL (default: SQLite)")
    parser.add_argument(
        "--pass-only", action="store_true", help="only (b): the pass creating 100 trials"
    )
    parser.add_argument(
        "--against",
        default=None,
        metavar="DIR",
        help="another checkout of Cohort whose (b) passes run in turn with these",
    )
    parser.add_argument("--against-python", default=None, metavar="PYTHON")
    parser.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args)
        return
    print(
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC {platform.node()} "
        f"Python {platform.python_version()}"
    )
    if args.pass_only or args.against:
        pass_rounds(args)
        return

    algorithms = ("random", "tpe", "cmaes")
    counts: dict[str, list[int]] = {a: [] for a in algorithms}
    ask_ms: dict[str, list[float]] = {a: [] for a in algorithms}
    for seed in range(1, args.seeds + 1):
        for algorithm in algorithms:
            count, per_ask = trials_to_target(algorithm, seed, args.target, args.cap)
            counts[algorithm].append(count)
            ask_ms[algorithm].append(per_ask * 1000)
    print(f"(a) trials until one is <= {args.target} on the bowl, {args.seeds} seeds:")
    for algorithm in algorithms:
        print(
            f"    {algorithm:7} median {statistics.median(counts[algorithm]):6.1f} trials "
            f"{sorted(counts[algorithm])}; {statistics.median(ask_ms[algorithm]):.2f} ms "
            "an ask (study rebuilt each time)"
        )
    ratios = [r / t for r, t in zip(counts["random"], counts["tpe"], strict=True)]
    print(f"    random/tpe per seed: median {statistics.median(ratios):.2f}")

    rules = {
        "median": {"rule": "median", "min_steps": 1},
        "asha": {"rule": "asha", "min_steps": 1},
        "hyperband": {"rule": "hyperband", "min_steps": 1, "max_steps": 100},
    }
    print("(c) a judgement: 100 finished trials of 100 points, 10 running at 50:")
    for name, rule in rules.items():
        ms = statistics.median(judging(rule, 100, 10, 100) for _ in range(args.rounds)) * 1000
        print(f"    {name:9} {ms:6.1f} ms (median of {args.rounds})")

    time_studies()
    with tempfile.TemporaryDirectory() as tmp:
        url = fresh_database(args.pg, Path(tmp), "optuna")
        migrate(url)
        engine = make_engine(url)
        kind = "PostgreSQL" if args.pg else "SQLite"
        figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for round_ in range(args.rounds):
            for shape in ("one", "many"):
                for algorithm in ("random", "tpe"):
                    ids = add_sweeps(engine, algorithm, shape, seed=round_ * 1000)
                    total, optuna_part, created = timed_pass(engine, ids)
                    assert created == 100, (shape, algorithm, created)
                    figures.setdefault((shape, algorithm), []).append((total, optuna_part))
        engine.dispose()
        drop_databases(args.pg, [url])
        if args.pg:
            url = fresh_database(args.pg, Path(tmp), "rdb")
            pairs = [rdb_against_memory(url, round_) for round_ in range(args.rounds)]
            drop_databases(args.pg, [url])
    print(f"(b) the sweep part of a pass creating 100 trials, {kind}, {args.rounds} rounds:")
    for (shape, algorithm), runs in figures.items():
        what = "1 sweep x 100 asks  " if shape == "one" else "100 sweeps x 1 ask  "
        total = statistics.median(t for t, _ in runs) * 1000
        part = statistics.median(o for _, o in runs) * 1000
        print(f"    {what} {algorithm:6}: {total:7.1f} ms, Optuna {part:6.1f} ms (median)")
    if args.pg:
        rdb = statistics.median(r for r, _ in pairs) * 1000
        memory = statistics.median(m for _, m in pairs) * 1000
        ratio = statistics.median(r / m for r, m in pairs)
        print(
            f"(d) 100 random asks after 20 told: RDBStorage {rdb:.1f} ms, in memory (rebuilt) "
            f"{memory:.1f} ms; median of per-round ratios {ratio:.1f}"
        )


if __name__ == "__main__":
    main()
