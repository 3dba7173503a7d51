"""What a parameter_server replica does besides training, by its role.

    worker, ps   a `tf.distribute.Server` named in TF_CONFIG, waiting for the chief's
                 closures (workers) or holding variables (ps); never user code
    chief        the trainer, under ParameterServerStrategy (runner.py); its
                 `ctx.callbacks()` add `evaluator_checkpoints` for the evaluator
    evaluator    outside the training cluster: `evaluate_checkpoints` evaluates each
                 checkpoint the chief writes and reports `eval_*` at its step

TensorFlow is imported inside the functions, like everywhere in the replica.
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.wire.replica import ReplicaSpec
from workers.replica.callbacks import announce, warn

if TYPE_CHECKING:
    from workers.replica.callbacks import ReplicaReporter
    from workers.replica.trainers import TrainerContext

# Roles the runner serves itself: the trainer never runs in them.
SERVER_ROLES = frozenset({"worker", "ps"})
# The chief's evaluation checkpoints kept on disk; older ones are deleted as new ones
# come (an evaluator that falls behind skips to the newest, as TensorFlow's does).
EVALUATOR_CHECKPOINTS_KEPT = 3
POLL_SECONDS = 1.0  # how often the evaluator looks for a new checkpoint


class RoleError(ValueError):
    """TF_CONFIG does not name this process the way its spec does."""


def is_server(spec: ReplicaSpec) -> bool:
    """Whether this process only serves a parameter_server cluster (no trainer)."""
    return spec.strategy == "parameter_server" and spec.role in SERVER_ROLES


def check_task(spec: ReplicaSpec) -> None:
    """Refuse a TF_CONFIG whose task is not this spec's role and index.

    Raises:
        RoleError: no TF_CONFIG, an unreadable one, or another task in it.
    """
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    except ValueError as exc:
        raise RoleError(f"TF_CONFIG is not JSON: {exc}") from exc
    task = config.get("task") if isinstance(config, dict) else None
    if not isinstance(task, dict) or (task.get("type"), task.get("index")) != (
        spec.role,
        spec.role_index,
    ):
        raise RoleError(
            f"TF_CONFIG's task {task or 'none'} is not this replica's "
            f"role {spec.role!r} index {spec.role_index}"
        )


def start_server(spec: ReplicaSpec) -> Any:
    """Start this worker's or ps's `tf.distribute.Server` on its TF_CONFIG address.

    Raises:
        RoleError: see `check_task`.
    """
    check_task(spec)
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=spec.role,
        task_index=spec.role_index,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    announce(f"server role={spec.role} index={spec.role_index} target={server.target}")
    return server


def serve(reporter: ReplicaReporter) -> None:
    """Keep the server up until SIGTERM (the control plane stops a worker or ps when the
    job ends). Waits in Python rather than in `server.join()`, where the runner's
    SIGTERM handler could never run; beats meanwhile, since the process has no
    steps of its own to show (the chief's show the job's progress)."""
    while True:
        reporter.beat()
        time.sleep(POLL_SECONDS)


def evaluator_checkpoints(directory: Path) -> Any:
    """The chief's Keras callback saving model and optimizer at each epoch end as
    `directory/ckpt-<epoch>` for the evaluator (the optimizer's `iterations` tell it
    the step). An epoch-end callback, which ParameterServerStrategy allows."""
    return _evaluator_checkpoints_class()(directory)


@functools.cache
def _evaluator_checkpoints_class() -> type:
    import tensorflow as tf
    import tf_keras as keras

    class EvaluatorCheckpoints(keras.callbacks.Callback):  # type: ignore[misc]  # tf_keras has no types
        def __init__(self, directory: Path) -> None:
            super().__init__()
            self._directory = directory
            self._manager: Any = None

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            if self._manager is None:
                checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.model.optimizer)
                self._manager = tf.train.CheckpointManager(
                    checkpoint,
                    str(self._directory),
                    max_to_keep=EVALUATOR_CHECKPOINTS_KEPT,
                    checkpoint_name="ckpt",
                )
            # Numbered by epoch, so a gang resumed from its backup continues the series.
            self._manager.save(checkpoint_number=epoch + 1)

    return EvaluatorCheckpoints


def evaluate_checkpoints(
    ctx: TrainerContext, model: Any, data: Any, final_step: int, *, steps: int | None = None
) -> dict[str, float]:
    """The evaluator's loop, for a trainer module's `evaluate(ctx)`.

    Waits for the chief's checkpoints in `ctx.evaluation_dir`, restores the newest
    into `model` (compiled with its metrics; built like the chief's), evaluates it
    on `data` (`steps` batches, or all of it) and reports each figure as `eval_<name>`
    at the checkpoint's training step. Returns the figures of the first checkpoint
    at or past `final_step` (epochs x steps_per_epoch). It never gives up waiting:
    a job whose chief is gone is stopped by the control plane.
    """
    import tensorflow as tf
    import tf_keras as keras

    reporter = ctx.reporter
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    beat = keras.callbacks.LambdaCallback(on_test_batch_end=lambda *_: reporter.beat())
    directory = str(ctx.evaluation_dir)
    announce(f"evaluator waiting for checkpoints in {directory} (final step {final_step})")
    evaluated = None
    while True:
        path = tf.train.latest_checkpoint(directory)
        if path is None or path == evaluated:
            reporter.beat()
            time.sleep(POLL_SECONDS)
            continue
        try:
            checkpoint.restore(path).expect_partial()
        except (tf.errors.NotFoundError, tf.errors.DataLossError) as exc:
            # The chief deleted it (only the newest few are kept): take the next one.
            warn(f"checkpoint {path} vanished while it was read ({exc}); trying the next")
            time.sleep(POLL_SECONDS)
            continue
        evaluated = path
        step = int(model.optimizer.iterations.numpy())
        results = model.evaluate(data, steps=steps, verbose=0, return_dict=True, callbacks=[beat])
        figures = {f"eval_{name}": float(value) for name, value in results.items()}
        ts = time.time()
        for name, value in figures.items():
            reporter.add(step, None, name, value, ts)
        reporter.flush()
        announce(
            f"evaluated {Path(path).name} step={step} "
            + " ".join(f"{name}={value:.4f}" for name, value in figures.items())
        )
        if step >= final_step:
            return figures
