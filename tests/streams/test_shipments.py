"""The node's joint shipments (workers/node/shipments.py) on a real Redis: every joined
replica's points leave in one MULTI/EXEC, which the leader's blocked ingest read takes
whole; a failed shipment keeps every point for the next; a wipe of Redis found by the
shipment's own transaction sends each replica's lost points again; a reporter flushing
on its own is left to it; a reporter that left flushes per poll again; the tick polls
the replicas' files before it ships, and the beats go in its shipment; a frozen Redis
delays the ticks and loses nothing."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import redis

from services.telemetry.metrics import parse_rows
from services.wire import client as wire_client
from services.wire.acl import agent_rule, agent_user
from services.wire.keys import METRICS_STREAM, PROGRESS_HASH, progress_field
from tests.e2e.conftest import wait_for
from tests.streams.conftest import Server
from workers.control.streams import GroupReader
from workers.node.report_shipper import MetricReporter, connect
from workers.node.scalars import ScalarShipper
from workers.node.shipments import Shipments


def reporter(replica: int, **kwargs: Any) -> MetricReporter:
    return MetricReporter.from_url(
        os.environ["COHORT_REDIS_URL"], job_id=7, attempt=1, replica=replica, **kwargs
    )


def stream_rows(bus: redis.Redis) -> list[tuple[Any, ...]]:
    return [row for _, fields in bus.xrange(METRICS_STREAM) for row in parse_rows(fields["data"])]


def test_a_tick_of_two_replicas_is_one_read_of_the_ingest(bus: redis.Redis) -> None:
    shipments = Shipments(connect(os.environ["COHORT_REDIS_URL"]), interval=3600)
    first, second = reporter(0), reporter(1)
    for one in (first, second):
        shipments.join(one)
        for step in range(3):
            one.add(step, None, "loss", 1.0 / (step + 1))
        one.maybe_flush(force=True)  # joined: the tick ships, not the poll
    assert bus.xlen(METRICS_STREAM) == 0

    reader = GroupReader(bus, METRICS_STREAM, 1000)
    reads: list[list[str]] = []
    # The leader's ingest: a read blocked on the stream before the shipment is sent.
    blocked = threading.Thread(
        target=lambda: reads.extend(
            [[fields["data"] for _, fields in entries] for entries in reader.batches(5000)]
        )
    )
    list(reader.batches(1))  # the group made, nothing pending
    blocked.start()
    time.sleep(0.3)
    assert shipments.ship() == 2
    blocked.join(10)
    # Both replicas' entries in the one read that was waiting: one transaction of the ingest.
    assert len(reads) == 1 and len(reads[0]) == 2
    rows = [row for data in reads[0] for row in parse_rows(data)]
    assert sorted((row[2], row[3]) for row in rows) == [(r, s) for r in (0, 1) for s in range(3)]
    assert first.pending == second.pending == 0
    assert shipments.ship() == 0  # nothing shipped twice


def test_a_failed_shipment_keeps_every_point_for_the_next(bus: redis.Redis) -> None:
    dead = Shipments(connect("redis://127.0.0.1:9/0"), interval=3600)
    one = reporter(0)
    dead.join(one)
    for step in range(5):
        one.add(step, None, "loss", float(step))
    assert dead.ship() == 0
    assert one.pending == 5
    live = Shipments(connect(os.environ["COHORT_REDIS_URL"]), interval=3600)
    live.join(one)
    # The failure paused the reporter's sends, as a failed flush of its own does.
    assert live.ship() == 0
    wait_for(lambda: live.ship() == 1, 5, "the shipment after the pause")
    assert sorted(row[3] for row in stream_rows(bus)) == list(range(5))
    assert one.pending == 0


def test_a_wipe_before_a_shipment_sends_every_replicas_lost_points_again(
    bus: redis.Redis,
) -> None:
    shipments = Shipments(connect(os.environ["COHORT_REDIS_URL"]), interval=3600)
    first, second = reporter(0), reporter(1)
    for one in (first, second):
        shipments.join(one)
        one.add(1, None, "loss", 0.5)
    assert shipments.ship() == 2
    bus.flushdb()  # Redis lost its data before the ingest stored the entries
    for one in (first, second):
        one.add(2, None, "loss", 0.25)
    assert shipments.ship() == 2
    # The shipment's transaction read the generation marker: a new one, so each replica
    # sent its lost point again at once (not after a look a second later of its own).
    assert sorted((row[2], row[3]) for row in stream_rows(bus)) == [
        (r, s) for r in (0, 1) for s in (1, 2)
    ]
    assert first.pending == second.pending == 0


def test_a_reporter_flushing_on_its_own_is_skipped(bus: redis.Redis) -> None:
    shipments = Shipments(connect(os.environ["COHORT_REDIS_URL"]), interval=3600)
    busy, idle = reporter(0), reporter(1)
    for one in (busy, idle):
        shipments.join(one)
        one.add(1, None, "loss", 0.5)
    with busy.held() as got:  # as its replica's exit flush holds it
        assert got
        assert shipments.ship() == 1  # the other's entry only; no wait on the lock
    assert [row[2] for row in stream_rows(bus)] == [1]
    assert busy.pending == 1


def test_a_reporter_that_left_flushes_per_poll_and_the_thread_ends(bus: redis.Redis) -> None:
    shipments = Shipments(connect(os.environ["COHORT_REDIS_URL"]), interval=0.05)
    one = reporter(0, flush_interval=0.0)
    shipments.join(one)
    one.add(1, None, "loss", 0.5)
    wait_for(lambda: bus.xlen(METRICS_STREAM) == 1, 5, "the thread's shipment")
    shipments.leave(one)
    one.add(2, None, "loss", 0.25)
    one.maybe_flush()
    assert [row[3] for row in stream_rows(bus)] == [1, 2]
    wait_for(lambda: shipments._thread is None, 5, "the thread's end with no reporter")
    shipments.join(one)  # a new thread for a new replica
    one.add(3, None, "loss", 0.125)
    wait_for(lambda: bus.xlen(METRICS_STREAM) == 3, 5, "the new thread's shipment")


def test_a_tick_polls_each_replicas_file_then_ships_what_it_read(
    bus: redis.Redis, tmp_path: Path
) -> None:
    shipments = Shipments(connect(os.environ["COHORT_REDIS_URL"]), interval=3600)
    one = reporter(0)
    follower = ScalarShipper(
        one,
        bus,
        job_id=7,
        attempt=1,
        index=0,
        metrics_file=tmp_path / "m.jsonl",
        poll_seconds=None,
    )
    follower.start()
    shipments.join(one, follower)
    with (tmp_path / "m.jsonl").open("a") as lines:
        lines.write(json.dumps({"step": 1, "metrics": {"loss": 0.5}, "ts": time.time()}) + "\n")
    time.sleep(0.2)
    assert bus.xlen(METRICS_STREAM) == 0  # its thread polls nothing while the tick does
    shipments.poll()
    assert bus.hget(PROGRESS_HASH, progress_field(7, 1, 0)) is None  # read, not beaten yet
    assert shipments.ship() == 1
    assert [(row[3], row[5]) for row in stream_rows(bus)] == [(1, "loss")]
    assert bus.hget(PROGRESS_HASH, progress_field(7, 1, 0)) is not None  # beaten with it
    # The replica exits: it leaves the tick, its own thread reads the unterminated rest.
    with (tmp_path / "m.jsonl").open("a") as lines:
        lines.write(json.dumps({"step": 2, "metrics": {"loss": 0.25}, "ts": time.time()}))
    shipments.leave(one)
    follower.finish()
    assert [row[3] for row in stream_rows(bus)] == [1, 2]


def test_the_beats_of_a_failed_shipment_go_with_the_next(bus: redis.Redis, tmp_path: Path) -> None:
    one = reporter(0)
    follower = ScalarShipper(
        one, bus, job_id=7, attempt=1, index=0, metrics_file=tmp_path / "m.jsonl", poll_seconds=None
    )
    dead = Shipments(connect("redis://127.0.0.1:9/0"), interval=3600)
    dead.join(one, follower)
    (tmp_path / "m.jsonl").write_text(json.dumps({"beat": time.time()}) + "\n")
    dead.poll()
    assert dead.ship() == 0
    live = Shipments(connect(os.environ["COHORT_REDIS_URL"]), interval=3600)
    live.join(one, follower)
    live.ship()  # nothing read since: the beat the failed shipment lost goes now
    assert bus.hget(PROGRESS_HASH, progress_field(7, 1, 0)) is not None


def test_a_frozen_redis_delays_the_ticks_and_loses_nothing(server: Server, tmp_path: Path) -> None:
    # The tick's Redis answers no more (SIGSTOP): each tick's one transaction times out,
    # every replica keeps its points and beats, a replica's exit leaves the tick, and once
    # Redis answers again every point of both replicas is on the stream.
    bus = redis.Redis(port=server.port, decode_responses=True)
    # As the agent's (report_shipper.connect): no retries of redis-py's; a shorter timeout.
    frozen = wire_client.connect(
        f"redis://127.0.0.1:{server.port}/0",
        retries=0,
        socket_timeout=0.5,
        decode_responses=False,
        health_check_interval=0,
    )
    shipments = Shipments(frozen, interval=0.1)
    reporters = [MetricReporter(frozen, job_id=7, attempt=1, replica=i) for i in (0, 1)]
    followers = [
        ScalarShipper(
            one,
            bus,
            job_id=7,
            attempt=1,
            index=one_index,
            metrics_file=tmp_path / f"m{one_index}.jsonl",
            poll_seconds=None,
        )
        for one_index, one in enumerate(reporters)
    ]

    def write(step: int) -> None:
        for index in (0, 1):
            with (tmp_path / f"m{index}.jsonl").open("a") as lines:
                record = {"step": step, "metrics": {"loss": 1.0 / step}, "ts": time.time()}
                lines.write(json.dumps(record) + "\n")

    def steps_of(index: int) -> set[int]:
        return {row[3] for row in stream_rows(bus) if row[2] == index}

    for one, follower in zip(reporters, followers, strict=True):
        shipments.join(one, follower)
    write(1)
    wait_for(lambda: steps_of(0) == steps_of(1) == {1}, 10, "the first tick's shipment")
    assert server.process is not None
    server.process.send_signal(signal.SIGSTOP)
    try:
        write(2)
        time.sleep(1.5)  # ticks under way, each timing out
        began = time.monotonic()
        shipments.leave(reporters[1])  # the replica exits: waits for the tick under way
        # A bound on the wait, not a speed: one tick's one timeout (0.5 s), where a round
        # trip per replica and beat, or redis-py's own retries, would stack up seconds.
        assert time.monotonic() - began < 5.0
    finally:
        server.process.send_signal(signal.SIGCONT)
    # Its own last read and flush ship the rest (a thread of its own, as at an exit).
    followers[1].start()
    followers[1].finish()
    write(3)  # replica 0 still runs: its tick ships 2 and 3 once Redis answers
    wait_for(lambda: steps_of(0) == {1, 2, 3}, 15, "the tick's shipments after the thaw")
    assert steps_of(1) >= {1, 2}
    assert bus.hget(PROGRESS_HASH, progress_field(7, 1, 0)) is not None
    assert reporters[0].pending == 0


def test_an_agents_acl_user_ships_points_and_beats_with_nothing_refused(
    server: Server, tmp_path: Path
) -> None:
    # The agent's own Redis user (services/wire/acl.py) may run EVALSHA and SCRIPT LOAD,
    # not EVAL: a command refused inside MULTI would abort the whole shipment. On a new
    # Redis the beat's script is not loaded yet: its beat alone fails, and goes next tick.
    admin = redis.Redis(port=server.port, decode_responses=True)
    password = "agent-password-0123456789"
    admin.execute_command("ACL", "SETUSER", *agent_rule("tick-node", password).split())
    url = f"redis://{agent_user('tick-node')}:{password}@127.0.0.1:{server.port}/0"
    one = MetricReporter(connect(url), job_id=7, attempt=1, replica=0)
    follower = ScalarShipper(
        one,
        wire_client.connect(url),
        job_id=7,
        attempt=1,
        index=0,
        metrics_file=tmp_path / "m.jsonl",
        poll_seconds=None,
    )
    shipments = Shipments(connect(url), interval=3600)
    shipments.join(one, follower)
    record = {"step": 1, "metrics": {"loss": 0.5}, "ts": time.time()}
    (tmp_path / "m.jsonl").write_text(json.dumps(record) + "\n")
    shipments.poll()
    assert shipments.ship() == 1  # the points, though the beat's script was missing
    field = progress_field(7, 1, 0)
    assert admin.hget(PROGRESS_HASH, field) is None
    assert shipments.ship() == 0  # nothing new to ship: the beat alone, its script loaded
    assert admin.hget(PROGRESS_HASH, field) is not None
    assert [row[3] for row in stream_rows(admin)] == [1]
    refused = [entry for entry in admin.acl_log() if entry.get("object") != "client|setinfo"]
    assert refused == []
