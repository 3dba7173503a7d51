"""Fire times of a schedule: cron expressions (5 fields, or 6 with seconds first) or a
fixed interval, in an IANA time zone, with daylight-saving changes handled. Pure: no I/O.

Cron fields are matched against the wall clock of the schedule's zone (croniter
does the matching on naive local times; this module maps them to instants):

- A wall time skipped by a spring-forward change (02:30 on the night clocks jump
  from 02:00 to 03:00) fires once, as PEP 495 resolves it: the same distance past
  the change (03:30 local time). Two skipped times that land on one instant fire once.
- A wall time that occurs twice at a fall-back change fires once, at its first
  occurrence, when the hour field is fixed ("30 2 * * *" is a daily job, not a
  twice-on-one-night job); with a wildcard hour ("*/30 * * * *") both occurrences
  fire, since they are different instants of a job meant to run every half hour.

Intervals are counted in real elapsed seconds from an anchor, so DST does not move them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, croniter

# Near a daylight-saving change a per-second cron steps through the changed hour
# twice over; far more than that means the expression never matches.
_MAX_CANDIDATES = 20_000


class InvalidCron(ValueError):
    """An expression or time zone that cannot be used; the message says how to fix it."""


def load_zone(name: str) -> ZoneInfo:
    """The IANA zone `name` (e.g. 'Europe/Berlin')."""
    if not name or ".." in name or name.startswith("/"):
        raise InvalidCron(f"unknown time zone {name!r}; use an IANA name such as 'Europe/Berlin'")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidCron(
            f"unknown time zone {name!r}; use an IANA name such as 'Europe/Berlin'"
        ) from exc


@dataclass(frozen=True)
class CronSpec:
    """A parsed cron expression."""

    expression: str
    with_seconds: bool
    wildcard_hour: bool


@lru_cache(maxsize=1024)  # pure, and called for every fire time of every schedule
def parse_cron(expression: str) -> CronSpec:
    """Validate a cron expression: 5 fields, or 6 with seconds as the first field."""
    fields = expression.split()
    if len(fields) not in (5, 6):
        raise InvalidCron(
            f"cron {expression!r} has {len(fields)} fields; give 5 (minute hour day month "
            "weekday) or 6 (second first)"
        )
    with_seconds = len(fields) == 6
    try:
        it = croniter(expression, dt.datetime(2000, 1, 1), second_at_beginning=with_seconds)
    except (CroniterBadCronError, ValueError, KeyError) as exc:
        raise InvalidCron(f"cron {expression!r} is not valid: {exc}") from exc
    try:
        it.get_next(dt.datetime)
    except ValueError as exc:  # e.g. '0 0 30 2 *': February has no 30th
        raise InvalidCron(
            f"cron {expression!r} never matches a date; check the day and month fields"
        ) from exc
    hour = fields[2 if with_seconds else 1]
    return CronSpec(" ".join(fields), with_seconds, hour == "*")


def _instants(naive: dt.datetime, zone: ZoneInfo, spec: CronSpec) -> list[dt.datetime]:
    """The UTC instants a matching local wall time stands for (see the module rules)."""
    first = naive.replace(tzinfo=zone, fold=0)
    second = naive.replace(tzinfo=zone, fold=1)
    first_utc, second_utc = first.astimezone(dt.UTC), second.astimezone(dt.UTC)
    if first_utc == second_utc:
        return [first_utc]  # an ordinary wall time
    if first.utcoffset() == first_utc.astimezone(zone).utcoffset():
        # Ambiguous (fall-back): fold=0 round-trips to itself.
        return [first_utc, second_utc] if spec.wildcard_hour else [first_utc]
    # Nonexistent (spring-forward gap): fold=0 maps it past the change.
    return [first_utc]


def _dst_slack(zone: ZoneInfo, at: dt.datetime) -> dt.timedelta:
    """How far wall time and real time may disagree near `at`: zero unless the zone's
    offset changes within the window (a few hours around a daylight-saving change)."""
    offsets = {(at + dt.timedelta(hours=h)).astimezone(zone).utcoffset() for h in (-3, 0, 3)}
    if len(offsets) == 1:
        return dt.timedelta(0)
    known = [o for o in offsets if o is not None]
    return max(known) - min(known) + dt.timedelta(minutes=1)


def next_cron_fire(spec: CronSpec, zone: ZoneInfo, after: dt.datetime) -> dt.datetime:
    """The first fire time strictly after `after` (aware), in UTC."""
    after_utc = after.astimezone(dt.UTC)
    slack = _dst_slack(zone, after_utc)
    # Near a change, start a little before `after` in wall time: in a repeated hour
    # the local clock reads earlier than it did an hour ago, and a skipped wall time
    # resolves to an instant past the change.
    start = after_utc.astimezone(zone).replace(tzinfo=None) - slack
    it = croniter(spec.expression, start, second_at_beginning=spec.with_seconds)
    best: dt.datetime | None = None
    best_naive: dt.datetime | None = None
    for _ in range(_MAX_CANDIDATES):
        naive = it.get_next(dt.datetime)
        if best_naive is not None and naive > best_naive + slack:
            break
        for instant in _instants(naive, zone, spec):
            if instant > after_utc and (best is None or instant < best):
                best, best_naive = instant, naive
    if best is None:
        raise InvalidCron(f"cron {spec.expression!r} never fires")
    return best


def next_interval_fire(
    anchor: dt.datetime, interval_seconds: int, after: dt.datetime
) -> dt.datetime:
    """The first `anchor + k * interval` strictly after `after` (k >= 1), in UTC."""
    step = dt.timedelta(seconds=interval_seconds)
    if after < anchor:
        return (anchor + step).astimezone(dt.UTC)
    k = (after - anchor) // step + 1
    return (anchor + k * step).astimezone(dt.UTC)


@dataclass(frozen=True)
class Timing:
    """When a schedule fires: a cron expression in a zone, or a fixed interval."""

    cron: str | None
    interval_seconds: int | None
    timezone: str
    anchor: dt.datetime

    def next_after(self, after: dt.datetime) -> dt.datetime:
        """The first fire time strictly after `after`, in UTC."""
        if self.cron:
            return next_cron_fire(parse_cron(self.cron), load_zone(self.timezone), after)
        assert self.interval_seconds
        return next_interval_fire(self.anchor, self.interval_seconds, after)

    def first_after(self, after: dt.datetime) -> dt.datetime | None:
        """`next_after`, or None when neither cron nor interval is set (data fires it)."""
        return self.next_after(after) if self.cron or self.interval_seconds else None

    def due_between(
        self, first: dt.datetime, now: dt.datetime, limit: int = 100
    ) -> tuple[list[dt.datetime], int]:
        """Fire times from `first` up to `now`: the newest `limit` of them, and how many
        there were in all (at least; after very long downtime the middle is jumped over)."""
        times: list[dt.datetime] = []
        total = 0
        current = first
        while current <= now:
            total += 1
            times.append(current)
            if len(times) > limit:
                times.pop(0)
            if total % 1000 == 0:
                # Days of a per-second schedule: jump to the last hour rather than step
                # through every missed second.
                recent = self.next_after(now - dt.timedelta(hours=1))
                if recent > current:
                    current = recent
                    continue
            current = self.next_after(current)
        return times, total
