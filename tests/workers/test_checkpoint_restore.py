"""Real TensorFlow saves checkpoints (CheckpointManager, max_to_keep=1) while the agent's
mirror syncs them to the artifact store, a directory or a real S3 server: every restore
taken meanwhile, on a fresh node, loads a whole checkpoint, and the last one arrives."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from services.storage.store import open_store
from workers.node.checkpoint_mirror import CheckpointMirror

JOB = 42

WRITER = textwrap.dedent("""
    import sys, time
    import tensorflow as tf
    step = tf.Variable(0, dtype=tf.int64)
    weights = tf.Variable(tf.zeros([256, 256]))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step, weights=weights),
                                         sys.argv[1] + "/chief", max_to_keep=1)
    for number in range(1, int(sys.argv[2]) + 1):
        step.assign(number)
        weights.assign(tf.fill([256, 256], float(number)))
        manager.save()
        time.sleep(0.05)
""")

READER = textwrap.dedent("""
    import sys
    import tensorflow as tf
    for directory in sys.argv[1:]:
        latest = tf.train.latest_checkpoint(directory + "/chief")
        reader = tf.train.load_checkpoint(latest)
        step = int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE"))
        weights = reader.get_tensor("weights/.ATTRIBUTES/VARIABLE_VALUE")
        assert (weights == step).all(), (directory, step)
        print(step)
""")


def test_every_restore_during_real_saves_loads_a_whole_checkpoint(
    artifact_env: str, tmp_path: Path
) -> None:
    store = open_store(artifact_env)
    local = tmp_path / "writer"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(local), "40"], stderr=subprocess.PIPE
    )
    mirror = CheckpointMirror(store, JOB, local)
    restored = []
    while writer.poll() is None or len(restored) < 3:
        mirror.sync()
        if store.exists(f"jobs/{JOB}/checkpoints/chief/checkpoint"):
            target = tmp_path / f"restore-{len(restored)}"
            try:
                CheckpointMirror(open_store(artifact_env), JOB, target).restore()
            except FileNotFoundError:
                continue  # rotated away while fetched: no checkpoint picked, none partial
            restored.append(target)
        time.sleep(0.1)
        if len(restored) > 30:
            break
    assert writer.wait(120) == 0, writer.stderr.read() if writer.stderr else ""
    mirror.sync()
    final = tmp_path / "final"
    CheckpointMirror(open_store(artifact_env), JOB, final).restore()
    reader = subprocess.run(
        [sys.executable, "-c", READER, *map(str, [*restored, final])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert reader.returncode == 0, reader.stderr[-3000:]
    steps = [int(line) for line in reader.stdout.split()]
    assert steps[-1] == 40  # the last save reached the store
    assert steps == sorted(steps) and steps[0] >= 1
