"""Cron parsing and next fire times, including daylight-saving edges, on a fake clock."""

from __future__ import annotations

import datetime as dt

import pytest

from services.retraining.cron import InvalidCron, Timing, load_zone, next_cron_fire, parse_cron

UTC = dt.UTC


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def fires(cron: str, zone: str, after: dt.datetime, count: int) -> list[dt.datetime]:
    timing = Timing(cron=cron, interval_seconds=None, timezone=zone, anchor=after)
    out, current = [], after
    for _ in range(count):
        current = timing.next_after(current)
        out.append(current)
    return out


def local(moments: list[dt.datetime], zone: str) -> list[str]:
    return [m.astimezone(load_zone(zone)).isoformat() for m in moments]


@pytest.mark.parametrize(
    "expression",
    [
        "* * * *",
        "* * * * * * *",
        "61 * * * *",
        "* 25 * * *",
        "hello world a b c",
        "",
        "*/0 * * * *",
        "0 0 30 2 *",
    ],
)
def test_bad_expressions_are_refused_with_a_hint(expression: str) -> None:
    with pytest.raises(InvalidCron):
        parse_cron(expression)


def test_five_and_six_fields() -> None:
    assert not parse_cron("*/5 * * * *").with_seconds
    six = parse_cron("*/10 * * * * *")  # seconds first
    assert six.with_seconds
    assert fires("*/10 * * * * *", "UTC", utc(2026, 1, 1, 0, 0, 3), 3) == [
        utc(2026, 1, 1, 0, 0, 10),
        utc(2026, 1, 1, 0, 0, 20),
        utc(2026, 1, 1, 0, 0, 30),
    ]
    assert fires("*/5 * * * *", "UTC", utc(2026, 1, 1, 0, 0), 2) == [
        utc(2026, 1, 1, 0, 5),
        utc(2026, 1, 1, 0, 10),
    ]


def test_next_fire_is_strictly_after() -> None:
    assert fires("0 * * * *", "UTC", utc(2026, 1, 1, 5, 0), 1) == [utc(2026, 1, 1, 6, 0)]


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../etc/passwd", "/etc/localtime", ""])
def test_unknown_zones_are_refused(zone: str) -> None:
    with pytest.raises(InvalidCron, match="IANA"):
        load_zone(zone)


def test_daily_job_in_a_zone_follows_the_wall_clock() -> None:
    # 09:00 in New York is 14:00 UTC in winter and 13:00 UTC in summer.
    out = fires("0 9 * * *", "America/New_York", utc(2026, 3, 6, 0, 0), 4)
    assert [m.hour for m in out] == [14, 14, 13, 13]  # DST starts on 8 March 2026


def test_berlin_spring_forward_skipped_time_fires_once_after_the_change() -> None:
    # 29 March 2026: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that night.
    out = fires("30 2 * * *", "Europe/Berlin", utc(2026, 3, 27, 12), 3)
    assert local(out, "Europe/Berlin") == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:30:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]


def test_berlin_spring_forward_hourly_has_no_duplicate() -> None:
    out = fires("0 * * * *", "Europe/Berlin", utc(2026, 3, 28, 23, 30), 4)  # 00:30 CET
    assert local(out, "Europe/Berlin") == [
        "2026-03-29T01:00:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T04:00:00+02:00",
        "2026-03-29T05:00:00+02:00",
    ]
    assert len(set(out)) == len(out)


def test_berlin_fall_back_daily_job_fires_once() -> None:
    # 25 October 2026: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    out = fires("30 2 * * *", "Europe/Berlin", utc(2026, 10, 23, 12), 3)
    assert local(out, "Europe/Berlin") == [
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]


def test_berlin_fall_back_half_hourly_job_runs_through_the_repeated_hour() -> None:
    out = fires("*/30 * * * *", "Europe/Berlin", utc(2026, 10, 24, 23, 45), 5)  # 01:45 CEST
    assert out == [
        utc(2026, 10, 25, 0, 0),
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 25, 1, 0),
        utc(2026, 10, 25, 1, 30),
        utc(2026, 10, 25, 2, 0),
    ]
    # Asked from inside the repeated hour (second 02:15), the next is the second 02:30.
    second_0215 = utc(2026, 10, 25, 1, 15)
    assert next_cron_fire(
        parse_cron("*/30 * * * *"), load_zone("Europe/Berlin"), second_0215
    ) == utc(2026, 10, 25, 1, 30)
    # A fixed-hour job asked from there goes to the next day.
    assert next_cron_fire(parse_cron("30 2 * * *"), load_zone("Europe/Berlin"), second_0215) == utc(
        2026, 10, 26, 1, 30
    )


def test_new_york_spring_forward_and_fall_back() -> None:
    # 8 March 2026 02:00 EST -> 03:00 EDT; 1 November 2026 02:00 EDT -> 01:00 EST.
    spring = fires("15 2 * * *", "America/New_York", utc(2026, 3, 7, 12), 2)
    assert local(spring, "America/New_York") == [
        "2026-03-08T03:15:00-04:00",
        "2026-03-09T02:15:00-04:00",
    ]
    fall = fires("30 1 * * *", "America/New_York", utc(2026, 10, 31, 12), 2)
    assert local(fall, "America/New_York") == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
    ]


def test_interval_counts_real_seconds_across_dst() -> None:
    anchor = utc(2026, 3, 29, 0, 0)
    timing = Timing(cron=None, interval_seconds=3600, timezone="Europe/Berlin", anchor=anchor)
    assert timing.next_after(anchor) == utc(2026, 3, 29, 1, 0)
    assert timing.next_after(utc(2026, 3, 29, 1, 0)) == utc(2026, 3, 29, 2, 0)
    assert timing.next_after(utc(2026, 3, 29, 1, 59, 59)) == utc(2026, 3, 29, 2, 0)
    assert timing.next_after(utc(2026, 3, 28)) == utc(2026, 3, 29, 1, 0)


def test_due_between_an_hour_of_downtime_keeps_the_tail() -> None:
    anchor = utc(2026, 1, 1)
    timing = Timing(cron=None, interval_seconds=10, timezone="UTC", anchor=anchor)
    first = utc(2026, 1, 1, 0, 0, 10)
    times, total = timing.due_between(first, utc(2026, 1, 1, 1, 0, 5))
    assert total == 360
    assert times[-1] == utc(2026, 1, 1, 1, 0, 0)
    assert len(times) == 100
    cron = Timing(cron="*/10 * * * * *", interval_seconds=None, timezone="UTC", anchor=anchor)
    assert cron.due_between(first, utc(2026, 1, 1, 1, 0, 5))[1] == 360
    assert cron.due_between(first, utc(2026, 1, 1, 0, 0, 9)) == ([], 0)


def test_per_second_crons_work_far_from_and_at_a_dst_change() -> None:
    assert fires("*/3 * * * * *", "Europe/Berlin", utc(2026, 6, 1, 0, 0, 1), 2) == [
        utc(2026, 6, 1, 0, 0, 3),
        utc(2026, 6, 1, 0, 0, 6),
    ]
    # Inside Berlin's repeated hour (second 02:15 local), every second still ticks on.
    assert fires("* * * * * *", "Europe/Berlin", utc(2026, 10, 25, 1, 15), 2) == [
        utc(2026, 10, 25, 1, 15, 1),
        utc(2026, 10, 25, 1, 15, 2),
    ]
