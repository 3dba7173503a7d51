"""A custom `strategy.run` training loop: no Cohort import, no Keras `fit`.

Cohort starts this script once per replica (`command: [python, train.py, ...]`) with
`TF_CONFIG` set for MultiWorkerMirroredStrategy, and names the directories to write to
in the environment. Scalars written with `tf.summary` to `COHORT_TENSORBOARD_DIR` are
streamed live (SSE, dashboard charts, CLI) and count as progress for the hang watchdog.
The chief saves a SavedModel to `COHORT_MODEL_DIR`, which `cohort artifact download` fetches.

Checkpoint now: when its node is drained, every replica gets SIGUSR1 (docs/your-code.md).
The handler only sets a flag; each step sums the flags across the gang (a save is a
collective, so every worker must decide at the same step), and once any is set all of
them save a checkpoint to `COHORT_CHECKPOINT_DIR` and exit 75. The next attempt, wherever
Cohort places it, finds that checkpoint restored there and goes on from the step after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile

import tensorflow as tf


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32, help="per replica")
    parser.add_argument("--learning-rate", type=float, default=0.05)
    return parser.parse_args()


def is_chief() -> bool:
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    return task.get("type", "worker") in ("worker", "chief") and task.get("index", 0) == 0


CHECKPOINTED = 75  # "saved, move me": the exit Cohort expects after SIGUSR1
asked = [0.0]  # set by SIGUSR1, read at the next step


def checkpoint_now(_signum: int, _frame: object) -> None:
    asked[0] = 1.0


def synthetic_data(seed: int = 0) -> tuple[tf.Tensor, tf.Tensor]:
    """y = x · w + noise, generated here so the example needs no download."""
    rng = tf.random.Generator.from_seed(seed)
    x = rng.normal((4096, 8))
    w = tf.constant([[0.5], [-1.0], [2.0], [0.0], [1.5], [-0.5], [0.25], [1.0]])
    return x, x @ w + 0.01 * rng.normal((4096, 1))


class Regressor(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = tf.Variable(tf.zeros((8, 1)), name="w")
        self.b = tf.Variable(tf.zeros((1,)), name="b")

    @tf.function(input_signature=[tf.TensorSpec((None, 8), tf.float32)])
    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return x @ self.w + self.b


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGUSR1, checkpoint_now)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    x, y = synthetic_data()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch)
    dist_dataset = strategy.experimental_distribute_dataset(dataset)

    with strategy.scope():
        model = Regressor()
        optimizer = tf.optimizers.SGD(args.learning_rate)
        done = tf.Variable(0, dtype=tf.int64, name="step")  # steps trained so far
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=done)
    checkpoint_dir = os.environ.get("COHORT_CHECKPOINT_DIR", "ckpt")
    # Every worker saves (a collective), each to a directory of its own: the chief's is
    # the job's, the others' are thrown away.
    own_dir = checkpoint_dir if is_chief() else tempfile.mkdtemp()
    manager = tf.train.CheckpointManager(checkpoint, own_dir, max_to_keep=1)
    latest = tf.train.latest_checkpoint(checkpoint_dir)
    if latest:
        checkpoint.restore(latest)
        print(f"resuming after step {int(done.numpy())}", flush=True)

    @tf.function
    def train_step(
        batch: tuple[tf.Tensor, tf.Tensor], flag: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        def step(features: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            with tf.GradientTape() as tape:
                per_example = tf.reduce_mean(tf.square(model(features) - labels), axis=1)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss, flag

        per_replica = strategy.run(step, args=batch)
        loss, flags = (
            strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None) for v in per_replica
        )
        return loss, flags

    writer = tf.summary.create_file_writer(os.environ.get("COHORT_TENSORBOARD_DIR", "tb"))
    iterator = iter(dist_dataset)
    with writer.as_default():
        for step in range(int(done.numpy()) + 1, args.steps + 1):
            loss, flags = train_step(next(iterator), tf.constant(asked[0]))
            done.assign(step)
            tf.summary.scalar("loss", loss, step=step)
            if float(flags) > 0:  # some worker was asked: all save at this same step
                writer.flush()
                manager.save(checkpoint_number=step)
                if not is_chief():
                    shutil.rmtree(own_dir, ignore_errors=True)
                print(f"checkpointed at step {step}: exiting {CHECKPOINTED}", flush=True)
                sys.exit(CHECKPOINTED)
            if step % 10 == 0:
                writer.flush()
                print(f"step {step} loss {float(loss):.4f}", flush=True)
    writer.flush()

    # Saving runs collectives under MultiWorkerMirroredStrategy, so every worker saves;
    # only the chief's copy is kept.
    model_dir = os.environ.get("COHORT_MODEL_DIR", "model")
    target = model_dir if is_chief() else tempfile.mkdtemp()
    tf.saved_model.save(model, target)
    if not is_chief():
        shutil.rmtree(target, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    finally:
        # Answered or done: a later SIGUSR1 has nothing to save. Ignored, since Python's
        # shutdown gives it its default action back, which would end the process as 138.
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
