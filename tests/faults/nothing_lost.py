"""What the replicas wrote against what Cohort stored: the check each fault test ends with.

A replica's own files on its node are the source of truth (workers/layout.py): its
metrics file (every point and beat Cohort's runner or `cohort.report()` wrote,
workers/replica/report_writer.py) and its log (stdout and stderr). Neither is removed
when a job ends (cleanup takes the checkpoints and scratch only), so they are read after
the job, on whichever node's DATA_DIR ran the replica. SQL is read first and the files
after, so nothing stored can be newer than what is compared with it.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from cli.stack import Stack
from cohort.metrics import decode_line
from services.models import Job, LogLine, MetricPoint, MetricRollup, Replica
from services.statuses import JobStatus
from services.telemetry.metrics import ROLLUP_STEPS
from workers import layout

Key = tuple[int, int]  # (attempt, replica)
PointKey = tuple[int, str]  # (step, name)
Point = tuple[float, float, int | None]  # value, ts, epoch


def agent_data_dirs(stack: Stack) -> dict[str, Path]:
    """Each agent of `stack` by node id, with its DATA_DIR (the stack's own unless
    `add_agent` was given one), absolute as the agent marks its replicas with it."""
    dirs: dict[str, Path] = {}
    for name, (_argv, extra) in stack.argv.items():
        if name == "agent" or name.startswith("agent-"):
            dirs[extra["COHORT_NODE_ID"]] = Path(
                extra.get("COHORT_DATA_DIR", stack.settings.data_dir)
            ).absolute()
    return dirs


def written_points(path: Path) -> dict[PointKey, Point]:
    """The points of a metrics file as the agent reads them (cohort/metrics.py decodes
    each line; a torn line is skipped, beats carry no point), the first value of a key
    written twice: the one stored (ON CONFLICT DO NOTHING)."""
    points: dict[PointKey, Point] = {}
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return points
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            decoded = decode_line(raw)
        except ValueError:
            continue
        for step, name, value, ts, epoch in decoded.points:
            points.setdefault((step, name), (value, ts, epoch))
    return points


def written_lines(path: Path) -> list[str]:
    """A log file's lines as the agent's shipper numbers them (workers/node/logship.py):
    split at newlines, a last unterminated line included (the replica has exited)."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    lines = [line.rstrip("\r") for line in text.split("\n")]
    if lines and not lines[-1]:
        lines.pop()  # after the last newline
    return lines


def rollup_problems(points: dict[Key, dict[PointKey, Point]], rollups: Iterable[Any]) -> list[str]:
    """Each stored point counted once in its rollup (`rollups`: a job's MetricRollup
    rows): the rollups add only newly stored points (services/telemetry/metrics.py), so a
    point ingested twice shows here even though the unique key kept one row."""
    expected: dict[tuple[int, int, str, int], list[float]] = defaultdict(list)
    for (attempt, replica), stored in points.items():
        for (step, name), (value, _ts, _epoch) in stored.items():
            expected[(attempt, replica, name, step // ROLLUP_STEPS)].append(value)
    problems = []
    seen = set()
    for row in rollups:
        key = (row.attempt, row.replica, row.name, row.bucket)
        seen.add(key)
        values = expected.get(key, [])
        if row.points != len(values) or not math.isclose(
            row.total, math.fsum(values), rel_tol=1e-9, abs_tol=1e-9
        ):
            problems.append(
                f"rollup {key}: {row.points} points, total {row.total}; "
                f"stored {len(values)} points, total {math.fsum(values)}"
            )
    problems += [f"stored points of {key} are in no rollup" for key in expected if key not in seen]
    return problems


def problems_of(
    database_url: str, dirs: dict[str, Path], job_id: int, agent_died_in: Iterable[int] = ()
) -> list[str]:
    """Every difference between what job `job_id`'s replicas wrote (in `dirs`: each node's
    DATA_DIR by node id) and what the database at `database_url` stored; see
    `assert_nothing_lost`."""
    died = set(agent_died_in)
    engine = sa.create_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            job = connection.execute(
                sa.select(Job.status, Job.attempt).where(Job.id == job_id)
            ).one()
            replicas = connection.execute(
                sa.select(Replica.attempt, Replica.index, Replica.node_id, Replica.pid).where(
                    Replica.job_id == job_id
                )
            ).all()
            stored: dict[Key, dict[PointKey, Point]] = defaultdict(dict)
            for p in connection.execute(
                sa.select(
                    MetricPoint.attempt,
                    MetricPoint.replica,
                    MetricPoint.step,
                    MetricPoint.name,
                    MetricPoint.value,
                    MetricPoint.ts,
                    MetricPoint.epoch,
                ).where(MetricPoint.job_id == job_id)
            ):
                stored[(p.attempt, p.replica)][(p.step, p.name)] = (p.value, p.ts, p.epoch)
            rollups = connection.execute(
                sa.select(MetricRollup).where(MetricRollup.job_id == job_id)
            ).all()
            lines: dict[Key, dict[int, str]] = defaultdict(dict)
            for line in connection.execute(
                sa.select(LogLine.attempt, LogLine.replica, LogLine.seq, LogLine.line).where(
                    LogLine.job_id == job_id
                )
            ):
                lines[(line.attempt, line.replica)][line.seq] = line.line
    finally:
        engine.dispose()

    problems = rollup_problems(stored, rollups)
    known = {(r.attempt, r.index) for r in replicas}
    problems += [
        f"points of {key}, which is no replica of the job" for key in stored if key not in known
    ]
    problems += [
        f"log lines of {key}, which is no replica of the job" for key in lines if key not in known
    ]
    # The attempt that ran to the end: a later one never replaced it, so none of its
    # points was refused as an old attempt's (services/telemetry/metrics.py fences them).
    ended = job.attempt if job.status in (JobStatus.SUCCEEDED, JobStatus.CANCELLED) else None
    # What makes the comparison mean something: the files are where the check reads them.
    # A replica that was started (its pid reported) has a log file, its agent made it
    # before the exec; and the attempt that ran to the end wrote points. Else a wrong
    # DATA_DIR or path would compare nothing with nothing and find no difference.
    ended_wrote = 0
    for r in sorted(replicas):
        key = (r.attempt, r.index)
        data_dir = dirs[r.node_id]
        log_path = layout.log_file(data_dir, job_id, r.attempt, r.index)
        if r.pid is not None and not log_path.exists():
            problems.append(f"{key}: started (pid {r.pid}) but no log file at {log_path}")
        written = written_points(layout.metrics_file(data_dir, job_id, r.attempt, r.index))
        if r.attempt == ended:
            ended_wrote += len(written)
        points = stored.get(key, {})
        invented = sorted(k for k in points if k not in written)
        if invented:
            problems.append(
                f"{key}: {len(invented)} points stored that its replica never "
                f"wrote, e.g. (step, name) {invented[:3]}"
            )
        changed = sorted(k for k in points if k in written and points[k] != written[k])
        if changed:
            problems.append(
                f"{key}: {len(changed)} points stored with another value, time "
                f"or epoch than written, e.g. {changed[0]}: stored "
                f"{points[changed[0]]}, written {written[changed[0]]}"
            )
        if r.attempt == ended and r.attempt not in died:
            missing = sorted(k for k in written if k not in points)
            if missing:
                problems.append(
                    f"{key}: {len(missing)} of {len(written)} points written "
                    f"never stored, e.g. (step, name) {missing[:3]}"
                )

        text = written_lines(log_path)
        shipped = lines.get(key, {})
        beyond = sorted(seq for seq in shipped if not 1 <= seq <= len(text))
        if beyond:
            problems.append(f"{key}: log lines {beyond[:5]} stored, the file has {len(text)}")
        differing = sorted(
            seq for seq in shipped if 1 <= seq <= len(text) and shipped[seq] != text[seq - 1]
        )
        if differing:
            seq = differing[0]
            problems.append(
                f"{key}: {len(differing)} log lines stored unlike the file, "
                f"e.g. line {seq}: {shipped[seq]!r} != {text[seq - 1]!r}"
            )
        # Every attempt's lines are kept (a failed attempt's output explains it): all of
        # them reach SQL unless the agent that shipped them died first.
        if r.attempt not in died:
            unstored = [seq for seq in range(1, len(text) + 1) if seq not in shipped]
            if unstored:
                problems.append(
                    f"{key}: {len(unstored)} of {len(text)} log lines never "
                    f"stored, e.g. {unstored[:5]}: {text[unstored[0] - 1]!r}"
                )
    if job.status == JobStatus.SUCCEEDED and not ended_wrote:
        problems.append(f"attempt {ended} succeeded, yet no replica's metrics file holds a point")
    return problems


def assert_nothing_lost(
    stack: Stack, job_id: int, *, agent_died_in: Iterable[int] = (), timeout: float = 60.0
) -> None:
    """What each replica of job `job_id` wrote is stored exactly once, whatever the fault.

    * Every attempt: no point or log line stored that its replica did not write, none
      with another value, time or line number; every stored point counted once in its
      rollup.
    * Every point of the attempt that ran to the end (the job's last, when it succeeded
      or was cancelled): a torn-down attempt's late points are refused by design.
    * Every log line of every attempt (the api keeps a failed attempt's output), but for
      `agent_died_in`: attempts whose node agent was killed with them, taking the lines
      it had not shipped.

    Waits up to `timeout` for what is still on its way, then fails naming what differs.
    """
    assert_stored_as_written(
        stack.settings.database_url,
        agent_data_dirs(stack),
        job_id,
        agent_died_in=agent_died_in,
        timeout=timeout,
    )


def assert_stored_as_written(
    database_url: str,
    dirs: dict[str, Path],
    job_id: int,
    *,
    agent_died_in: Iterable[int] = (),
    timeout: float = 60.0,
) -> None:
    """`assert_nothing_lost` for any deployment: its database and each node's DATA_DIR
    (for containers, the agents' volumes as the host sees them)."""
    deadline = time.monotonic() + timeout
    while True:
        problems = problems_of(database_url, dirs, job_id, agent_died_in)
        if not problems or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    assert not problems, f"job {job_id}: " + "; ".join(problems)
