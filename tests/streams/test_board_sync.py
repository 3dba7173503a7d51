"""A running replica's TensorBoard directory reaches the artifact store while it runs, not
only when it exits: real TensorFlow writes summaries under the replica's directory while
the agent's sidecar follows it (the default store, under DATA_DIR)."""

from __future__ import annotations

from pathlib import Path

import redis

from services.settings import Settings
from services.storage.store import open_store
from tests.e2e.conftest import wait_for
from tests.tfsummaries import start_writer
from workers import layout
from workers.node.launcher import ReplicaKey
from workers.node.sidecar import Sidecars

JOB = 43


def test_event_files_reach_the_store_while_the_replica_writes_them(
    bus: redis.Redis, tmp_path: Path
) -> None:
    settings = Settings(
        DATA_DIR=tmp_path / "data", ARTIFACT_URL="", NODE_ID="n1", TENSORBOARD_SYNC_INTERVAL=0.2
    )
    sidecars = Sidecars(settings, bus)
    key = ReplicaKey(JOB, 1, 0)
    sidecars.follow(key)
    sidecars.start(key)
    board = layout.tensorboard_dir(settings.data_dir, JOB, 0)
    writer = start_writer(board, steps=40, pause=0.1)
    store = open_store(settings=settings)
    prefix = f"jobs/{JOB}/tensorboard/replica-0/"
    try:
        # The writer's three runs ("", train/, validation/), each an event file, grow for
        # about 4 s after TensorFlow's import: the store has them before it is done.
        listed = wait_for(
            lambda: len(store.list(prefix)) == 3 and store.list(prefix), 60, "event files"
        )
        assert writer.poll() is None, "the writer ended before the store had its files"
        wait_for(
            lambda: writer.poll() is None and store.list(prefix) != listed or None,
            30,
            "the store's copy to grow while the writer runs",
        )
    finally:
        _, stderr = writer.communicate(timeout=60)
    assert writer.returncode == 0, stderr.decode(errors="replace")[-2000:]
    log = layout.log_file(settings.data_dir, JOB, 1, 0)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("done\n")
    sidecars.finish(key, log, timeout=60)
    local = {p.relative_to(board).as_posix(): p.read_bytes() for p in board.rglob("*.v2")}
    stored = {k[len(prefix) :]: store.open_read(k).read() for k, _ in store.list(prefix)}
    assert len(local) == 3 and stored == local  # at exit: every byte written
