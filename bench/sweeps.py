"""What sweeps cost the scheduler's pass.

(a) a scheduling pass on a database without sweeps, with as many queued jobs as (b)
    has queued trials (the placer's share of the pass is then the same);
(b) the same pass with S running sweeps of T trials each, every sweep at its
    max_concurrent of queued trials (nothing to create, nothing to end: the steady
    state of a busy cluster): the sweep part alone (`advance_sweeps`) and the whole pass;
(c) one pass in which every sweep has one free turn: S trial jobs created.
(a) and (b) are interleaved, a, b, a, b, ..., on two fresh databases.
Trials ask for a GPU on a cluster without nodes, so they stay queued.

    .venv/bin/python bench/sweeps.py [--sweeps 100] [--trials 1000] [--queued 10]
        [--passes 30] [--pg postgresql+psycopg://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.schedules import drop_databases, fresh_database  # noqa: E402
from cli.stack import migrate  # noqa: E402
from services.auth import tokens  # noqa: E402
from services.db import make_engine  # noqa: E402
from services.models import Job, Sweep, SweepTrial  # noqa: E402
from services.scheduling import scheduler_pass  # noqa: E402
from services.settings import Settings  # noqa: E402
from services.statuses import JobStatus  # noqa: E402
from services.sweeps import advance, store  # noqa: E402
from services.sweeps.schemas import SweepCreate  # noqa: E402

TEMPLATE = {"strategy": "one_device", "replicas": 1, "gpus_per_replica": 1}  # stays queued


def add_sweeps(
    url: str, sweeps: int, trials: int, queued: int, settings: Settings, as_sweeps: bool = True
) -> None:
    """`sweeps` running sweeps of `trials` random trials, each with `queued` trials queued
    (`as_sweeps=False`: the same queued jobs, no sweeps)."""
    with Session(make_engine(url)) as session, session.begin():
        token = tokens.ensure_token(
            session=session,
            token="bench_" + uuid.uuid4().hex,
            project_name="bench",
            name="bench",
            scopes=["read", "submit", "schedules"],
        )
        spec = SweepCreate.model_validate(
            {
                "name": "bench",
                "template": TEMPLATE,
                "trials": trials,
                "max_concurrent": queued,
                "space": {
                    "random": {
                        "learning_rate": {"distribution": "log_uniform", "low": 1e-4, "high": 0.1}
                    },
                    "seed": 1,
                },
                "objective": {"metric": "eval_accuracy", "mode": "max"},
                "early_stopping": {"rule": "median", "min_steps": 10},
            }
        )
        first = store.create_sweep(
            session=session, project_id=token.project_id, sweep_in=spec, settings=settings
        )
        rows, trial_rows = [], []
        for s in range(sweeps):
            sweep = (
                first
                if s == 0
                else Sweep(
                    project_id=first.project_id,
                    name=f"bench-{s}",
                    spec=first.spec,
                    seed=s,
                    trials_total=trials,
                    max_concurrent=queued,
                    priority=0,
                    reason="",
                    stops_early=True,
                )
            )
            session.add(sweep)
            session.flush()
            sweep.trials_created = queued
            for index in range(queued):
                params = {"learning_rate": 1e-4 * (index + 1)}
                job_in = store.trial_job(spec, params, index)
                trial_rows.append(
                    {
                        "sweep_id": sweep.id,
                        "trial_index": index,
                        "parameters": params,
                        "system_attrs": {},
                    }
                )
                rows.append(
                    {
                        "project_id": first.project_id,
                        "name": job_in.name,
                        "trainer": job_in.trainer,
                        "strategy": job_in.strategy,
                        "replicas": 1,
                        "gpus_per_replica": 1,
                        "spec_hash": "bench",
                        "hyperparameters": job_in.hyperparameters.model_dump(),
                        "status": JobStatus.QUEUED,
                        "reason": "waiting for the scheduler",
                        "sweep_id": sweep.id,
                        "trial_index": index,
                    }
                )
        session.execute(sa.insert(Job), rows)
        session.execute(sa.insert(SweepTrial), trial_rows)
        if not as_sweeps:
            session.execute(sa.update(Job).values(sweep_id=None, trial_index=None))
            session.execute(sa.delete(SweepTrial))
            session.execute(sa.delete(Sweep))


def timed(engine: sa.Engine, settings: Settings, sweeps_only: bool) -> float:
    start = time.perf_counter()
    with Session(engine) as session, session.begin():
        if sweeps_only:
            advance.advance_sweeps(session=session, settings=settings)
        else:
            scheduler_pass.run_pass(session=session, settings=settings, heartbeats=[])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweeps", type=int, default=100)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument(
        "--queued", type=int, default=10, help="queued trials per sweep (= its max_concurrent)"
    )
    parser.add_argument("--passes", type=int, default=30)
    parser.add_argument("--pg", default=None, help="PostgreSQL admin URL (default: SQLite)")
    args = parser.parse_args()
    settings = Settings()
    with tempfile.TemporaryDirectory() as tmp:
        urls = [fresh_database(args.pg, Path(tmp), name) for name in ("a", "b")]
        for url in urls:
            migrate(url)
        add_sweeps(urls[0], args.sweeps, args.trials, args.queued, settings, as_sweeps=False)
        add_sweeps(urls[1], args.sweeps, args.trials, args.queued, settings)
        engines = [make_engine(url) for url in urls]
        for engine in engines:
            with engine.begin() as connection:
                connection.execute(sa.text("ANALYZE"))
        passes: list[list[float]] = [[], []]
        part: list[list[float]] = [[], []]
        for _ in range(args.passes):
            for which in (0, 1):
                passes[which].append(timed(engines[which], settings, sweeps_only=False))
                part[which].append(timed(engines[which], settings, sweeps_only=True))
        # (c): one free turn for every sweep.
        with Session(engines[1]) as session, session.begin():
            session.execute(
                sa.update(Job).where(Job.trial_index == 0).values(status=JobStatus.CANCELLED)
            )
        start = time.perf_counter()
        with Session(engines[1]) as session, session.begin():
            created = advance.advance_sweeps(session=session, settings=settings).created
        create = time.perf_counter() - start
        for engine in engines:
            engine.dispose()
        drop_databases(args.pg, urls)
    ms = {
        k: statistics.median(v) * 1000
        for k, v in {"pa": passes[0], "pb": passes[1], "sa": part[0], "sb": part[1]}.items()
    }
    kind = "PostgreSQL" if args.pg else "SQLite"
    queued = args.sweeps * args.queued
    print(
        f"{dt.date.today()} {platform.node()} {platform.python_version()} {kind}, "
        f"{args.sweeps} sweeps x {args.trials} trials, {queued} trials queued, "
        f"{args.passes} passes"
    )
    print(
        f"(a) pass, no sweeps, {queued} queued jobs: {ms['pa']:8.2f} ms (median); "
        f"sweep part {ms['sa']:.2f} ms"
    )
    print(
        f"(b) pass, {args.sweeps} running sweeps:       {ms['pb']:8.2f} ms (median)  "
        f"b/a {ms['pb'] / ms['pa']:.2f}  b-a {ms['pb'] - ms['pa']:.2f} ms"
    )
    print(f"    the sweep part of (b) alone:     {ms['sb']:8.2f} ms (median)")
    if created:
        print(
            f"(c) sweep part creating {len(created)} trials: {create * 1000:8.2f} ms  "
            f"= {create / len(created) * 1000:.2f} ms per trial"
        )


if __name__ == "__main__":
    main()
