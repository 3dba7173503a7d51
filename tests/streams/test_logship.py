"""The agent's log shipper against a real redis-server that dies and comes back empty."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.e2e.conftest import wait_for
from tests.streams.conftest import Server


def shipped(client: redis.Redis) -> dict[int, str]:
    """Line number -> text of every line on the logs stream."""
    lines: dict[int, str] = {}
    for _id, fields in client.xrange("cohort:logs"):
        for seq, _ts, text in json.loads(fields["data"])["lines"]:
            lines[seq] = text
    return lines


def test_no_log_line_is_lost_to_a_redis_outage_or_restart(server: Server, tmp_path: Path) -> None:
    from workers.node.launcher import ReplicaKey
    from workers.node.logship import LogShipper

    # As the agent's client: fail fast, no hidden retries.
    client = redis.Redis(
        port=server.port,
        decode_responses=True,
        socket_connect_timeout=0.5,
        socket_timeout=1.0,
        retry=Retry(NoBackoff(), 0),
    )
    path = tmp_path / "replica-0.log"
    path.write_text("".join(f"before {i}\n" for i in range(1, 101)))
    shipper = LogShipper(client, ReplicaKey(7, 1, 0), path, poll_seconds=0.05)
    shipper.start()
    wait_for(lambda: len(shipped(client)) == 100, 10, "the first lines to be shipped")

    server.kill()
    with open(path, "a") as handle:
        handle.write("".join(f"during {i}\n" for i in range(101, 201)))
    wait_for(lambda: shipper.failures >= 1, 10, "the shipper to meet the outage")
    server.start()  # empty: the first 100 lines are gone with the old Redis
    with open(path, "a") as handle:
        handle.write("".join(f"after {i}\n" for i in range(201, 251)) + "unterminated")
    shipper.finish(timeout=30)

    lines = shipped(client)
    assert sorted(lines) == list(range(1, 252))  # every line, replayed ones included
    assert lines[1] == "before 1" and lines[150] == "during 150"
    assert lines[250] == "after 250" and lines[251] == "unterminated"
    assert shipper.failures == 0


def test_lines_redis_refuses_are_shipped_once_it_takes_writes_again(
    server: Server, tmp_path: Path
) -> None:
    """The same Redis throughout (no restart, so no replay): refused lines are read
    again from the file."""
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
    path.write_text("one\n")
    shipper = LogShipper(client, ReplicaKey(7, 1, 0), path, poll_seconds=0.05)
    shipper.start()
    wait_for(lambda: len(shipped(client)) == 1, 10, "the first line to be shipped")
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")  # every write is refused: OOM
    with open(path, "a") as handle:
        handle.write("".join(f"refused {i}\n" for i in range(2, 102)))
    wait_for(lambda: shipper.failures >= 2, 10, "the shipper to be refused twice")
    client.config_set("maxmemory", "0")
    shipper.finish(timeout=30)
    lines = shipped(client)
    assert sorted(lines) == list(range(1, 102))
    assert lines[101] == "refused 101"


def test_lines_sent_just_before_a_long_outage_are_replayed(server: Server, tmp_path: Path) -> None:
    """Redis away for longer than the replay window: what it held before it died is
    still sent again (the window counts back from its last answer, not from now)."""
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
    path.write_text("".join(f"before {i}\n" for i in range(1, 11)))
    shipper = LogShipper(client, ReplicaKey(7, 1, 0), path, poll_seconds=0.05, replay_window=0.2)
    shipper.start()
    wait_for(lambda: len(shipped(client)) == 10, 10, "the first lines to be shipped")
    server.kill()
    with open(path, "a") as handle:
        handle.write("during 11\n")
    # Four refusals in a row take 0.05 + 0.1 + 0.2 + 0.4 s: longer than the window.
    wait_for(lambda: shipper.failures >= 4, 20, "an outage longer than the window")
    server.start()
    shipper.finish(timeout=30)
    assert sorted(shipped(client)) == list(range(1, 12))


def test_the_last_flush_keeps_lines_that_cross_a_read(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Everything left at the replica's exit is read in several reads: a line that a read
    boundary cuts stays one line."""
    import workers.node.logship
    from workers.node.launcher import ReplicaKey
    from workers.node.logship import LogShipper

    monkeypatch.setattr(workers.node.logship, "READ_BYTES", 64)
    client = redis.Redis(port=server.port, decode_responses=True)
    path = tmp_path / "replica-0.log"
    printed = [f"line {i:03d}" for i in range(1, 41)]
    path.write_text("\n".join(printed))  # 9 bytes a line: reads of 64 cut lines; no final newline
    shipper = LogShipper(client, ReplicaKey(7, 1, 0), path, poll_seconds=3600)
    shipper.start()  # ships nothing before finish(): the first poll is an hour away
    shipper.finish(timeout=30)
    assert [shipped(client)[seq] for seq in range(1, 41)] == printed
    assert len(shipped(client)) == 40


def test_lines_a_flushall_erased_are_shipped_again(server: Server, tmp_path: Path) -> None:
    """A FLUSHALL keeps the server (its run_id) but not its data: the shipper notices it
    by the generation marker and sends the lines of the window again."""
    from workers.node.launcher import ReplicaKey
    from workers.node.logship import LogShipper

    client = redis.Redis(port=server.port, decode_responses=True)
    path = tmp_path / "replica-0.log"
    path.write_text("".join(f"before {i}\n" for i in range(1, 51)))
    shipper = LogShipper(client, ReplicaKey(7, 1, 0), path, poll_seconds=0.05)
    shipper.start()
    wait_for(lambda: len(shipped(client)) == 50, 10, "the first lines to be shipped")
    run_id = client.info("server")["run_id"]
    client.flushall()
    assert client.info("server")["run_id"] == run_id  # nothing to tell by run_id
    # Shipped again though the log is quiet: it may never print another line.
    wait_for(lambda: len(shipped(client)) == 50, 10, "the erased lines to be shipped again")
    with open(path, "a") as handle:
        handle.write("".join(f"after {i}\n" for i in range(51, 61)))
    shipper.finish(timeout=30)
    lines = shipped(client)
    assert sorted(lines) == list(range(1, 61))
    assert lines[1] == "before 1" and lines[60] == "after 60"


def test_a_keras_progress_bar_is_shipped_at_its_last_state(server: Server, tmp_path: Path) -> None:
    """The lines shipped read as a terminal showed them; the file keeps every byte."""
    from workers.node.launcher import ReplicaKey, tail
    from workers.node.logship import LogShipper

    client = redis.Redis(port=server.port, decode_responses=True)
    written = (
        Path(__file__).parents[1] / "unit" / "data" / "tf_keras_fit_verbose1.log"
    ).read_bytes()
    path = tmp_path / "replica-0.log"
    path.write_bytes(written)
    shipper = LogShipper(client, ReplicaKey(7, 1, 0), path, poll_seconds=0.05)
    shipper.start()
    shipper.finish(timeout=30)
    lines = shipped(client)
    assert [lines[seq] for seq in sorted(lines)][:2] == [
        "Epoch 1/2",
        "10/10 [==============================] - 0s 2ms/step - loss: 0.5409 - accuracy: 0.7188",
    ]
    assert not any("\b" in text or "\r" in text for text in lines.values())
    assert path.read_bytes() == written
    assert tail(path).splitlines()[-2:] == [
        "10/10 [==============================] - 0s 1ms/step - loss: 0.5309 - accuracy: 0.7312",
        "done",
    ]
