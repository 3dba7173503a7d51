"""What data triggers cost, and how soon a push starts a run.

(a) The pass's added cost: `fire_data_triggers` with N data-triggered schedules whose data
    did not change (the every-tick case: one grouped SQL query, no store listing), on a
    PostgreSQL database holding `--files` data rows per schedule; median of `--passes`.
(b) Latency: on a `cohort up` stack of its own (api, scheduler, agent), a schedule with
    `settle_seconds` 0 fires a job that stays queued (a GPU job on a CPU node); each of
    `--pushes` uploads of new content is timed from the upload's answer to the job's
    `created_at`.

    .venv/bin/python bench/data_triggers.py [--schedules 0,10,100,1000] [--files 20]
        [--passes 30] [--pushes 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pg import DEFAULT_SERVER, drop_database, new_database  # noqa: E402
from bench.scratch_stack import scratch_stack  # noqa: E402
from cli.stack import migrate  # noqa: E402
from services.auth import tokens  # noqa: E402
from services.db import make_engine  # noqa: E402
from services.models import DataFileRecord, Schedule, utcnow  # noqa: E402
from services.retraining import data_triggers  # noqa: E402
from services.settings import Settings  # noqa: E402

JOB = {"strategy": "one_device", "replicas": 1, "gpus_per_replica": 1}  # stays queued


def pass_cost(count: int, files: int, passes: int, scratch: Path) -> float:
    """Median seconds of one idle `fire_data_triggers` with `count` triggers."""
    url = new_database(DEFAULT_SERVER, "cohort_bench_triggers")
    try:
        migrate(url)
        engine = make_engine(url)
        settings = Settings(DATABASE_URL=url, DATA_DIR=str(scratch))
        now = utcnow()
        with Session(engine) as session, session.begin():
            token = tokens.ensure_token(
                session=session, token="bench_t", project_name="p", name="t", scopes=["admin"]
            )
            project = token.project_id
            for index in range(count):
                session.add_all(
                    DataFileRecord(
                        project_id=project,
                        path=f"s{index}/f{n}",
                        sha256="sha256:x",
                        updated_at=now - dt.timedelta(hours=1),
                    )
                    for n in range(files)
                )
                session.add(
                    Schedule(
                        project_id=project,
                        name=f"s{index}",
                        job_template=JOB,
                        trigger_path=f"s{index}",
                        data_seen_at=now - dt.timedelta(hours=1),  # looked at: nothing new
                        last_outcome="",
                    )
                )
        times = []
        for _ in range(passes):
            with Session(engine) as session, session.begin():
                start = time.perf_counter()
                fired = data_triggers.fire_data_triggers(
                    session=session, settings=settings, now=now + dt.timedelta(seconds=5)
                )
                times.append(time.perf_counter() - start)
                assert fired == []
        engine.dispose()
        return statistics.median(times)
    finally:
        drop_database(DEFAULT_SERVER, url)


def latency(pushes: int, scratch: Path) -> list[float]:
    """Seconds from each upload's answer to its run's job created."""
    with scratch_stack(scratch, "triggers") as (_stack, client):
        client.request(
            "POST",
            "/api/v1/schedules",
            {"name": "l", "job": JOB, "trigger": {"data": "data/d", "settle_seconds": 0}},
        )
        local = scratch / "x.csv"
        seconds = []
        for n in range(1, pushes + 1):
            local.write_text(f"content {n}\n")
            client.upload_data("d/x.csv", local)
            answered = time.time()
            while len(jobs := client.jobs(limit=100).items) < n:
                time.sleep(0.02)
            created = max(job.created_at for job in jobs).timestamp()
            seconds.append(created - answered)
        return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", default="0,10,100,1000")
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--passes", type=int, default=30)
    parser.add_argument("--pushes", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for count in (int(c) for c in args.schedules.split(",") if c):
            cost = pass_cost(count, args.files, args.passes, Path(tmp))
            print(f"(a) {count:5d} data triggers, {args.files} files each: {cost * 1e3:.2f} ms")
        if args.pushes:
            seconds = latency(args.pushes, Path(tmp))
            print(
                f"(b) push answered -> job created, settle_seconds=0: median "
                f"{statistics.median(seconds):.2f} s, max {max(seconds):.2f} s ({args.pushes})"
            )


if __name__ == "__main__":
    main()
