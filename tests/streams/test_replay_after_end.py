"""A replica's senders outlive it by the replay window (workers/node/replay.py AfterEnd): a
wipe of Redis just after a replica ended, before the leader stored its last points and
log lines, must not lose them (the chaos soak, tests/chaos, found a succeeded attempt
whose last points were never stored). Against a real redis-server that dies or is
flushed."""

from __future__ import annotations

from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.e2e.conftest import wait_for
from tests.streams.conftest import Server
from tests.streams.test_logship import shipped
from workers.node.replay import AfterEnd

POINTS = [
    (step, 0, name, float(step), 1000.0 + step)
    for step in range(1, 21)
    for name in ("loss", "accuracy")
]


def points_on_stream(client: redis.Redis) -> set[tuple[int, str]]:
    """(step, name) of every point on the metrics stream."""
    from services.wire.batches import MetricBatch

    found = set()
    for _id, fields in client.xrange("cohort:metrics"):
        batch = MetricBatch.decode(fields[b"data"])
        found.update((step, name) for step, _epoch, name, _value, _ts in batch.points)
    return found


def reporter_for(server: Server):  # type: ignore[no-untyped-def]
    from workers.node.report_shipper import MetricReporter, connect

    return MetricReporter(
        connect(f"redis://127.0.0.1:{server.port}/0"), job_id=7, attempt=1, replica=0
    )


def test_last_points_a_wipe_erased_after_the_replicas_end_are_sent_again(server: Server) -> None:
    reporter = reporter_for(server)
    for step, epoch, name, value, ts in POINTS:
        reporter.add(step, epoch, name, value, ts)
    assert reporter.flush(wait=5.0)  # the replica's last points, sent at its exit
    client = redis.Redis(port=server.port)
    sent = {(step, name) for step, _e, name, _v, _t in POINTS}
    assert points_on_stream(client) == sent
    ended = AfterEnd()
    ended.keep(reporter.send_again, reporter.close)
    ended.tick()  # no wipe: nothing is sent twice
    assert client.xlen("cohort:metrics") == 1

    client.flushall()  # before the leader stored them; nobody of the replica is left
    ended.tick()
    assert points_on_stream(client) == sent
    assert len(ended) == 1  # kept until its window is over


def test_last_points_redis_refused_at_the_end_go_out_when_it_is_back(server: Server) -> None:
    reporter = reporter_for(server)
    reporter.add(1, 0, "loss", 0.5, 1000.0)
    assert reporter.flush(wait=5.0)
    server.kill()
    reporter.add(2, 0, "loss", 0.4, 1001.0)
    assert not reporter.flush(wait=0.2)  # the exit is reported with the point unsent
    ended = AfterEnd()
    ended.keep(reporter.send_again, reporter.close)
    server.start()  # empty: step 1 is gone with the old server
    client = redis.Redis(port=server.port)

    def both() -> bool:
        ended.tick()
        return points_on_stream(client) == {(1, "loss"), (2, "loss")}

    wait_for(both, 10, "step 2, and step 1 again, on the new server")


def test_a_log_shippers_last_lines_a_wipe_erased_after_its_end_are_shipped_again(
    server: Server, tmp_path: Path
) -> None:
    from workers.node.launcher import ReplicaKey
    from workers.node.logship import LogShipper

    client = redis.Redis(
        port=server.port,
        decode_responses=True,
        socket_connect_timeout=0.5,
        socket_timeout=1.0,
        retry=Retry(NoBackoff(), 0),
    )
    path = tmp_path / "replica-0.log"
    path.write_text("".join(f"line {i}\n" for i in range(1, 31)) + "the last, unterminated")
    shipper = LogShipper(client, ReplicaKey(7, 1, 0), path, poll_seconds=3600)
    shipper.start()
    shipper.finish(timeout=30)  # the replica exited: every line shipped, the thread ended
    assert not shipper.is_alive()
    assert sorted(shipped(client)) == list(range(1, 32))
    ended = AfterEnd()
    ended.keep(shipper.send_again)
    client.flushall()
    ended.tick()
    lines = shipped(client)
    assert sorted(lines) == list(range(1, 32))
    assert lines[31] == "the last, unterminated"


def test_a_sender_is_closed_and_forgotten_once_its_window_is_over() -> None:
    calls: list[str] = []
    ended = AfterEnd(window=3600)
    ended.keep(lambda: calls.append("send a"), lambda: calls.append("close a"))
    ended.tick()
    assert calls == ["send a"] and len(ended) == 1

    over = AfterEnd(window=0)

    def refused() -> None:
        calls.append("send b")
        raise redis.ConnectionError("away")  # a failure never ends the ticks

    over.keep(refused, lambda: calls.append("close b"))
    over.tick()  # its last chance, then closed
    assert calls[1:] == ["send b", "close b"] and len(over) == 0
    over.tick()
    assert calls[1:] == ["send b", "close b"]
