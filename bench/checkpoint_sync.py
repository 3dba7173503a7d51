"""What mirroring a job's checkpoints to the artifact store costs.

1. Per sync: the mlp_digits model (tf-keras, with its Adam state) is saved by a
   CheckpointManager as BackupAndRestore saves it (max_to_keep=1), then the agent's
   CheckpointMirror syncs the directory (new data and index first, the state file last,
   the rotated-out checkpoint deleted); N times, to a directory store and to a real S3
   server (moto's standalone server). Reports ms per sync and bytes per checkpoint.
2. Per epoch: the sync runs in the agent, not in the training loop, so what a training
   epoch pays is the CPU the agent's syncer takes beside it. mlp_digits trains with
   BackupAndRestore saving at every epoch end, once alone and once with a syncer process
   polling its checkpoint directory every second (as the agent does); reports the mean
   epoch time of each.

    .venv/bin/python bench/checkpoint_sync.py [--saves 30] [--epochs 8] [--steps 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from services.storage.store import ArtifactStore, open_store  # noqa: E402
from tests.e2e.conftest import free_port  # noqa: E402
from tests.s3server import CREDENTIALS, create_bucket, moto_server  # noqa: E402
from workers.node.checkpoint_mirror import CheckpointMirror  # noqa: E402

SYNCER = textwrap.dedent("""
    import sys, time
    from services.storage.store import open_store
    from workers.node.checkpoint_mirror import CheckpointMirror
    from workers.node.checkpoint_syncer import CheckpointSyncer
    syncer = CheckpointSyncer(CheckpointMirror(open_store(sys.argv[1]), 1, sys.argv[2]),
                              name="bench")
    syncer.start()
    time.sleep(3600)
""")


def mlp_model() -> Any:
    from workers.replica.trainers.mlp_digits import DEFAULTS, build_model

    return build_model(int(DEFAULTS["hidden_units"]), float(DEFAULTS["learning_rate"]))


def per_sync(store: ArtifactStore, workdir: Path, saves: int) -> tuple[list[float], int]:
    """Seconds each sync took after each of `saves` checkpoints, and bytes per checkpoint."""
    import numpy as np
    import tensorflow as tf

    model = mlp_model()
    x, y = np.random.rand(64, 64).astype("float32"), np.random.randint(0, 10, 64)
    model.fit(x, y, epochs=1, verbose=0)  # the optimizer's slots exist, as in training
    local = workdir / f"ckpt-{uuid.uuid4().hex[:8]}"
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model), str(local / "chief"), max_to_keep=1
    )
    mirror = CheckpointMirror(store, 1, local)
    mirror.restore()  # as before a replica starts: lists the (empty) prefix
    times = []
    for _ in range(saves):
        model.train_on_batch(x, y)
        manager.save()
        started = time.perf_counter()
        mirror.sync()
        times.append(time.perf_counter() - started)
    size = sum(p.stat().st_size for p in (local / "chief").iterdir() if p.is_file())
    return times, size


def epoch_times(
    workdir: Path, epochs: int, steps: int, beside: Callable[[Path], subprocess.Popen[bytes]] | None
) -> list[float]:
    """mlp_digits' epochs with BackupAndRestore at each epoch end; `beside` starts a
    process next to it (given the checkpoint directory)."""
    import tensorflow as tf
    import tf_keras as keras

    from workers.replica.trainers.mlp_digits import load_splits

    backup = workdir / f"backup-{uuid.uuid4().hex[:8]}"
    x, y, _, _ = load_splits(0)
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x)).repeat().batch(32)
    model = mlp_model()
    times: list[float] = []

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            times.append(time.perf_counter() - self.started)

    process = beside(backup) if beside else None
    try:
        # Timer after BackupAndRestore: an epoch's time includes its checkpoint save.
        model.fit(
            data,
            epochs=epochs,
            steps_per_epoch=steps,
            verbose=0,
            callbacks=[
                keras.callbacks.BackupAndRestore(
                    str(backup), save_freq="epoch", delete_checkpoint=False
                ),
                Timer(),
            ],
        )
    finally:
        if process is not None:
            process.terminate()
            process.wait()
    return times[1:]  # the first epoch traces the graph


def ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"median {1000 * statistics.median(values):.1f} ms, p95 {1000 * p95:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--saves", type=int, default=30)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )
    with tempfile.TemporaryDirectory() as tmp, moto_server(free_port()) as endpoint:
        work = Path(tmp)
        create_bucket(endpoint, "bench")
        os.environ.update({**CREDENTIALS, "COHORT_ARTIFACT_ENDPOINT_URL": endpoint})
        stores = {"directory": str(work / "artifacts"), "S3 (moto)": "s3://bench/run"}
        for name, url in stores.items():
            times, size = per_sync(open_store(url), work, args.saves)
            print(
                f"sync after each save, {name}: {ms(times[1:])} "
                f"({args.saves} saves of {size / 1000:.0f} kB)"
            )

        def syncer(url: str) -> Callable[[Path], subprocess.Popen[bytes]]:
            return lambda backup: subprocess.Popen(
                [sys.executable, "-c", SYNCER, url, str(backup)],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )

        # Rounds alternate the three set-ups, so a busy moment of the machine does not
        # land on one of them only.
        setups: dict[str, Callable[[Path], subprocess.Popen[bytes]] | None] = {
            "no sync": None,
            **{f"agent syncing to {n}": syncer(u) for n, u in stores.items()},
        }
        epochs: dict[str, list[float]] = {name: [] for name in setups}
        for _ in range(args.rounds):
            for name, beside in setups.items():
                epochs[name] += epoch_times(work, args.epochs, args.steps, beside)
        alone = statistics.median(epochs["no sync"])
        for name, times in epochs.items():
            print(
                f"epoch of {args.steps} steps + save, {name}: {ms(times)}; median "
                f"{1000 * (statistics.median(times) - alone):+.1f} ms against no sync"
            )


if __name__ == "__main__":
    main()
