"""services/jobs/bulk_rows.py against the library's two ways of inserting many rows.

A placing pass stores 1,250 replica rows for 500 gangs. Three ways, each inserting the
same `--rows` rows of `replicas` in a transaction rolled back after, interleaved round by
round (bench/rounds.py) on a database of its own (made from the tests' migrated template
on 127.0.0.1:5432, dropped after):

* json_recordset: `insert_rows`, the rows as one JSON document read by
  `json_to_recordset` (one statement);
* executemany: `session.execute(sa.insert(table), rows)`, psycopg's pipelined executemany;
* insert_values: `session.execute(sa.insert(table).values(rows))`, one multi-row VALUES
  statement with a bound parameter per value, compiled by SQLAlchemy.

Reported: each side's median wall and CPU (this process's) time, and the median of the
per-round wall ratios to json_recordset.

    .venv/bin/python bench/bulk_insert.py [--rows 1250] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from rounds import interleaved, per_round_ratios, ratio_row  # noqa: E402

from services.cluster.nodes import Heartbeat, record_heartbeats  # noqa: E402
from services.jobs.bulk_rows import insert_rows  # noqa: E402
from services.models import Replica, utcnow  # noqa: E402
from tests.conftest import create_database, drop_database  # noqa: E402
from tests.factories import create_job, create_token, replica_rows  # noqa: E402

REPLICAS = cast(sa.Table, Replica.__table__)
SIDES: dict[str, Callable[[Session, list[dict[str, Any]]], object]] = {
    "json_recordset": lambda session, rows: insert_rows(session, REPLICAS, rows),
    "executemany": lambda session, rows: session.execute(sa.insert(REPLICAS), rows),
    "insert_values": lambda session, rows: session.execute(sa.insert(REPLICAS).values(rows)),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1250)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    name = f"cohort_bench_bulk_{int(time.time())}"
    engine = sa.create_engine(create_database(name))
    try:
        with Session(engine) as session:
            _, token = create_token(session)
            job_id = create_job(session, token.project_id).id
            beat = Heartbeat(node_id="n1", address="10.1.0.1", slots=8, gpus=0, at=utcnow())
            record_heartbeats(session=session, beats=[beat])
            session.commit()
        cpu: dict[str, list[float]] = {side: [] for side in SIDES}

        def timed(side: str) -> float:
            with Session(engine) as session:
                rows = replica_rows(job_id, args.rows, utcnow())
                started, used = time.perf_counter(), time.process_time()
                SIDES[side](session, rows)
                session.flush()
                took = time.perf_counter() - started
                cpu[side].append(time.process_time() - used)
                session.rollback()
            return took

        walls = interleaved({side: partial(timed, side) for side in SIDES}, args.rounds)
    finally:
        engine.dispose()
        drop_database(name)
    print(f"\n{args.rows} replica rows, {args.rounds} rounds\n")
    print("| side | wall, median | CPU, median |\n|---|---:|---:|")
    for side in SIDES:
        wall, used = statistics.median(walls[side]), statistics.median(cpu[side][1:])
        print(f"| {side} | {wall * 1000:.1f} ms | {used * 1000:.1f} ms |")
    print("\n| measure | median | rounds |\n|---|---:|---|")
    for side in ("executemany", "insert_values"):
        print(
            ratio_row(f"{side} / json_recordset", per_round_ratios(walls, side, "json_recordset"))
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
