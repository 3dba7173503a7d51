"""What a scheduled run is told about its fire: the variables every replica of its job
(or of its sweep's trials) gets, after the job's own `env`, so they cannot be overridden.

- `COHORT_SCHEDULED_FOR`: the fire time, ISO 8601 in UTC.
- A cron or interval fire: `COHORT_DATA_INTERVAL_START` / `_END`, the data interval it
  covers, as Airflow's `data_interval_start/end`: from the end of the last interval a
  run was made for (the schedule's creation, for its first) to this fire time. Fire times
  skipped or missed made no run, so the next run's interval covers theirs too: the
  intervals of a schedule's runs tile time without a gap.
- A data trigger's fire: `COHORT_DATA_VERSION`, the content's digest, and as interval
  the newest change of the content handled before (unset for the first) to this
  content's newest change: the changes this run is for.

A run started by hand (`POST /schedules/{id}/trigger`) gets `COHORT_SCHEDULED_FOR` only.
The values are stored on the job row (`Job.schedule_env`) as it is created, and reach
replicas through the replica spec (services/jobs/replica_specs.py, RESOLVED).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

SCHEDULED_FOR = "COHORT_SCHEDULED_FOR"
INTERVAL_START = "COHORT_DATA_INTERVAL_START"
INTERVAL_END = "COHORT_DATA_INTERVAL_END"
DATA_VERSION = "COHORT_DATA_VERSION"


def iso(moment: dt.datetime) -> str:
    """ISO 8601 in UTC with a 'Z' (what Python's datetime.fromisoformat reads back)."""
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Fire:
    """One fire of a schedule: when, and what data it is for."""

    scheduled_for: dt.datetime
    interval_start: dt.datetime | None = None
    interval_end: dt.datetime | None = None
    data_version: str | None = None  # a data trigger's content digest

    def env(self) -> dict[str, str]:
        values = {SCHEDULED_FOR: iso(self.scheduled_for)}
        if self.interval_start is not None:
            values[INTERVAL_START] = iso(self.interval_start)
        if self.interval_end is not None:
            values[INTERVAL_END] = iso(self.interval_end)
        if self.data_version is not None:
            values[DATA_VERSION] = self.data_version
        return values

    def note(self) -> str:
        """What a run record's reason adds: the data version it was for."""
        return f" for data version {self.data_version}" if self.data_version else ""
