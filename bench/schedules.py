"""What cron schedules cost the scheduler's pass.

(a) a scheduling pass on a database without schedules;
(b) the same pass with N idle schedules stored (none due): the due-schedule query;
(c) a pass in which all N schedules are due: each fires one job (row lock, job insert,
    run record, next fire time) — the per-fire cost.
(a) and (b) are interleaved, a, b, a, b, ..., on two fresh databases of the same kind.

    .venv/bin/python bench/schedules.py [--schedules 1000] [--passes 50]
        [--pg postgresql+psycopg://postgres@127.0.0.1:5432/postgres]
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

from cli.stack import migrate  # noqa: E402
from services.auth import tokens  # noqa: E402
from services.db import make_engine  # noqa: E402
from services.retraining import schedules  # noqa: E402
from services.retraining.schemas import ScheduleCreate  # noqa: E402
from services.scheduling import scheduler_pass  # noqa: E402
from services.settings import Settings  # noqa: E402

JOB = {"strategy": "one_device", "replicas": 1, "gpus_per_replica": 1}  # stays queued
T0 = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


def fresh_database(pg: str | None, tmp: Path, name: str) -> str:
    if not pg:
        return f"sqlite:///{tmp / name}.db"
    admin = sa.create_engine(pg, isolation_level="AUTOCOMMIT")
    database = f"cohort_bench_{name}_{uuid.uuid4().hex[:6]}"
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{database}"'))
    admin.dispose()
    return sa.engine.make_url(pg).set(database=database).render_as_string(hide_password=False)


def drop_databases(pg: str | None, urls: list[str]) -> None:
    """Drop what fresh_database made on PostgreSQL (SQLite files go with the temp dir)."""
    if not pg:
        return
    admin = sa.create_engine(pg, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        for url in urls:
            name = sa.engine.make_url(url).database
            connection.execute(sa.text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


def add_schedules(url: str, count: int, settings: Settings) -> None:
    with Session(make_engine(url)) as session, session.begin():
        token = tokens.ensure_token(
            session=session,
            token="bench_" + uuid.uuid4().hex,
            project_name="bench",
            name="bench",
            scopes=["read", "submit", "schedules"],
        )
        for i in range(count):
            schedules.create_schedule(
                session=session,
                project_id=token.project_id,
                settings=settings,
                now=T0,
                schedule_in=ScheduleCreate.model_validate(
                    {
                        "name": f"s{i}",
                        "job": JOB,
                        "cron": "*/5 * * * *",
                        "timezone": "Europe/Berlin",
                    }
                ),
            )


def timed_pass(engine: sa.Engine, settings: Settings, now: dt.datetime) -> float:
    start = time.perf_counter()
    with Session(engine) as session, session.begin():
        scheduler_pass.run_pass(session=session, settings=settings, heartbeats=[], now=now)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=50)
    parser.add_argument("--pg", default=None, help="PostgreSQL admin URL (default: SQLite)")
    args = parser.parse_args()
    settings = Settings()
    with tempfile.TemporaryDirectory() as tmp:
        urls = [fresh_database(args.pg, Path(tmp), name) for name in ("a", "b")]
        for url in urls:
            migrate(url)
        add_schedules(urls[1], args.schedules, settings)
        engines = [make_engine(url) for url in urls]
        idle_at = T0 + dt.timedelta(minutes=1)  # before the first fire time (12:05)
        times: list[list[float]] = [[], []]
        for _ in range(args.passes):
            for which in (0, 1):
                times[which].append(timed_pass(engines[which], settings, idle_at))
        fire_at = T0 + dt.timedelta(minutes=5, seconds=1)
        fire = timed_pass(engines[1], settings, fire_at)
        with engines[1].connect() as connection:
            fired = connection.execute(sa.text("SELECT count(*) FROM jobs")).scalar_one()
        after = statistics.median(
            timed_pass(engines[1], settings, fire_at) for _ in range(args.passes)
        )
        for engine in engines:
            engine.dispose()
        drop_databases(args.pg, urls)
    a, b = statistics.median(times[0]), statistics.median(times[1])
    kind = "PostgreSQL" if args.pg else "SQLite"
    print(
        f"{dt.date.today()} {platform.node()} {platform.python_version()} {kind}, "
        f"{args.schedules} schedules, {args.passes} passes"
    )
    print(f"(a) pass, no schedules:            {a * 1000:8.2f} ms (median)")
    print(
        f"(b) pass, {args.schedules} idle schedules:  {b * 1000:8.2f} ms (median)  "
        f"b/a {b / a:.2f}  b-a {(b - a) * 1000:.2f} ms"
    )
    print(
        f"(c) pass firing {fired} schedules:  {fire * 1000:8.2f} ms  "
        f"= {fire / max(fired, 1) * 1000:.2f} ms per fire"
    )
    print(f"    next pass (queue of {fired} waiting jobs, none due): {after * 1000:.2f} ms")


if __name__ == "__main__":
    main()
