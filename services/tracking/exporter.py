"""One round of the MLflow export: new jobs given their rows, then each open run brought up
to date: made (with its params and tags) once its job has started, its new points sent in
batches, its tags when the job's status changes, and its end once the job has ended and
settled (services/telemetry/settling.py: no point of it is still on its way).

Reads run in plain transactions; each step is recorded in its own short transaction of
`sessions` (the leader's fenced one) only after MLflow answered, and no transaction stays
open across a call to MLflow. A server that does not answer fails every run on it for the
round, without calling it again; each run waits (services/tracking/exports.py) and is
tried again, its job unaffected.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from services.db import Sessions, session_scope
from services.models import utcnow
from services.settings import Settings
from services.storage.keys import model_prefix
from services.storage.store import store_uri
from services.telemetry.settling import Settling
from services.tracking import exports, targets
from services.tracking.client import RunWriter, TrackingError
from services.tracking.exports import OpenRun
from services.tracking.run_fields import RUN_STATUS, metric_key, run_name, run_params, run_tags

log = logging.getLogger("cohort.mlflow")

BATCH = 1000  # points a log_batch call (MLflow's most)
BATCHES_PER_RUN = 20  # a round's share for one run: the other runs' points are not held up
PAGE = 500  # open runs read at a time


def _ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


@dataclass
class Round:
    """What one round did."""

    discovered: int = 0
    points: int = 0
    ended: int = 0
    failed: int = 0


@dataclass
class Exporter:
    """The export's state between rounds: a client per server, and each ended job's wait
    to settle. Everything else is in SQL."""

    settings: Settings
    redis: redis.Redis
    sessions: Sessions = session_scope
    writer: Callable[[str], RunWriter] = RunWriter
    retry_max: float = exports.RETRY_MAX
    writers: dict[str, RunWriter] = field(default_factory=dict)
    settling: dict[int, Settling] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)  # servers whose last call failed

    def run_round(self) -> Round:
        """Discover new jobs, then bring every open run up to date (raises Fenced)."""
        done = Round()
        now = utcnow()
        with session_scope() as session:
            found = targets.read_targets(session=session, settings=self.settings)
            started = targets.any_started(session=session)
        if found or started:  # else nothing to write (a fenced transaction locks SQLite)
            with self.sessions() as session:
                done.discovered = targets.discover_jobs(session=session, targets=found, now=now)
        down: dict[str, str] = {}  # servers that failed this round: why
        after = 0
        while True:
            with session_scope() as session:
                page = exports.read_open_runs(
                    session=session, now=now, after_job_id=after, limit=PAGE
                )
            for open_run in page:
                if open_run.needs_work():
                    self._bring_up_to_date(open_run, down, done)
            if len(page) < PAGE:
                return done
            after = page[-1].job.id

    def _bring_up_to_date(self, open_run: OpenRun, down: dict[str, str], done: Round) -> None:
        uri = open_run.export.tracking_uri
        try:
            if uri in down:  # not called again this round
                raise TrackingError(down[uri], server_down=True)
            done.points += self._export(open_run)
            done.ended += open_run.export.ended_at is not None
        except TrackingError as exc:
            done.failed += 1
            if exc.server_down:
                down[uri] = str(exc)
            self._failed(open_run, str(exc))
        else:
            self._succeeded(open_run)

    def _writer(self, uri: str) -> RunWriter:
        if uri not in self.writers:
            self.writers[uri] = self.writer(uri)
        return self.writers[uri]

    def _export(self, open_run: OpenRun) -> int:
        """Bring one run up to date; returns the points sent."""
        export, job = open_run.export, open_run.job
        writer = self._writer(export.tracking_uri)
        if export.run_id is None:
            self._open(writer, open_run)
        assert export.run_id is not None
        sent = self._send_points(writer, open_run, open_run.newest_point)
        if export.status_logged != job.status:
            writer.log(export.run_id, tags=self._tags(open_run))
            self._record(open_run, status_logged=str(job.status))
        if open_run.finished and export.metric_cursor >= open_run.newest_point:
            sent += self._end(writer, open_run)
        return sent

    def _open(self, writer: RunWriter, open_run: OpenRun) -> None:
        export, job = open_run.export, open_run.job
        experiment_id = writer.experiment_id(export.experiment)
        run_id = writer.open_run(
            experiment_id,
            export_key=export.export_key,
            name=run_name(job),
            start_ms=_ms(job.started_at or job.created_at),
            tags=self._tags(open_run),
        )
        writer.log(run_id, params=run_params(job))  # the same again after a crash: kept once
        self._record(
            open_run, experiment_id=experiment_id, run_id=run_id, status_logged=str(job.status)
        )

    def _tags(self, open_run: OpenRun) -> dict[str, str]:
        job = open_run.job
        model = store_uri(model_prefix(job.id), settings=self.settings)
        return run_tags(job, project=job.project.name, model_uri=model)

    def _send_points(self, writer: RunWriter, open_run: OpenRun, newest: int) -> int:
        """Send the job's points up to id `newest`, a batch at a time, each recorded once
        MLflow took it (at most BATCHES_PER_RUN this round)."""
        export = open_run.export
        assert export.run_id is not None
        sent = 0
        for _ in range(BATCHES_PER_RUN):
            if export.metric_cursor >= newest:
                break
            with session_scope() as session:
                points = exports.read_points(
                    session=session, job_id=export.job_id, after=export.metric_cursor, limit=BATCH
                )
            if not points:
                break
            writer.log(
                export.run_id,
                metrics=[
                    (metric_key(name, replica), value, int(ts * 1000), step)
                    for _, replica, step, name, value, ts in points
                ],
            )
            self._record(open_run, metric_cursor=points[-1][0], points=export.points + len(points))
            sent += len(points)
        return sent

    def _end(self, writer: RunWriter, open_run: OpenRun) -> int:
        """End the run once its finished job has settled, after its last points; returns
        the points sent first."""
        export, job = open_run.export, open_run.job
        assert export.run_id is not None and job.finished_at is not None
        if not self.settling.setdefault(job.id, Settling()).settled(job.id, self.redis):
            return 0
        with session_scope() as session:
            newest = exports.newest_point(session=session, job_id=job.id)
        sent = self._send_points(writer, open_run, newest)
        if export.metric_cursor < newest:
            return sent  # more than a round's share: the rest, and the end, next round
        writer.end(export.run_id, status=RUN_STATUS[job.status], end_ms=_ms(job.finished_at))
        self._record(open_run, ended_at=utcnow())
        self.settling.pop(job.id, None)
        return sent

    def _record(self, open_run: OpenRun, **done: object) -> None:
        """Commit a step MLflow took, and keep the row in step for the rest of the round."""
        with self.sessions() as session:
            exports.record(session=session, job_id=open_run.job.id, **done)
        for name, value in done.items():
            setattr(open_run.export, name, value)

    def _succeeded(self, open_run: OpenRun) -> None:
        uri = open_run.export.tracking_uri
        if uri in self.failing:
            self.failing.discard(uri)
            log.info("MLflow export to %s resumed", uri)
        if open_run.export.failures:
            with self.sessions() as session:
                exports.record(session=session, job_id=open_run.job.id)
                exports.note(session, open_run, f"MLflow export to {uri} resumed")
            open_run.export.failures = 0

    def _failed(self, open_run: OpenRun, error: str) -> None:
        uri = open_run.export.tracking_uri
        if uri not in self.failing:
            self.failing.add(uri)
            log.warning("MLflow export to %s failing (retrying): %s", uri, error)
        with self.sessions() as session:
            exports.record_failure(
                session=session,
                open_run=open_run,
                error=error,
                now=utcnow(),
                retry_max=self.retry_max,
            )
