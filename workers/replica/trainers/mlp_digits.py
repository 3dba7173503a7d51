"""Built-in trainer `mlp_digits`: a small MLP on scikit-learn's bundled 8x8 digits.

The digits are read from the file scikit-learn ships, without importing scikit-learn:
its import cost every replica half a CPU-second (and as much wall time) before its first
step, for a 1,797-row table.

Needs no download, trains in seconds on a CPU and reaches ~0.95 held-out
accuracy, which makes it the smoke test and benchmark workload of Cohort.

Under parameter_server, `train` runs on the chief (the workers read their part of
the data through a DatasetCreator) and `evaluate` on the evaluator; an evaluation job
runs `evaluate` on the saved model and a holdout (holdout.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras as keras

from workers.replica.backups import DEFAULT_BACKUP_STEPS
from workers.replica.callbacks import announce, warn
from workers.replica.trainers import DEFAULT_BATCH_SIZE, TrainerContext
from workers.replica.trainers.holdout import evaluate_saved

DEFAULTS: dict[str, Any] = {
    "epochs": 5,
    "steps_per_epoch": 20,
    "batch_size": DEFAULT_BATCH_SIZE,  # per replica
    "learning_rate": 0.01,
    "hidden_units": 64,
    "seed": 0,
    # A backup every N steps bounds the work a killed or torn-down gang redoes;
    # 0: at each epoch end only.
    "checkpoint_every_steps": DEFAULT_BACKUP_STEPS,
    # tf.config.experimental.enable_op_determinism: the same weights from the same seed.
    "deterministic": True,
    # False: no backups at all (a restart starts over; "checkpoint now" is not answered).
    "backups": True,
}


TEST_FRACTION = 0.2


def digits_file() -> Path:
    """scikit-learn's digits table (64 pixels 0-16, then the label, per row), found
    without running scikit-learn's package (`find_spec` only locates it)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "mlp_digits reads scikit-learn's bundled digits: install "
            "scikit-learn (the worker extra pins it)"
        )
    return Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"


def load_splits(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The digits as (x_train, y_train, x_test, y_test): TEST_FRACTION of each class held
    out, both parts in an order shuffled by `seed`, pixels in [0, 1]."""
    table = np.loadtxt(digits_file(), delimiter=",", dtype=np.float32)
    x = table[:, :-1] / 16.0
    y = table[:, -1].astype(np.int32)
    rng = np.random.default_rng(seed)
    test: list[np.ndarray] = []
    train: list[np.ndarray] = []
    for label in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == label))
        held = round(len(rows) * TEST_FRACTION)
        test.append(rows[:held])
        train.append(rows[held:])
    train_rows = rng.permutation(np.concatenate(train))
    test_rows = rng.permutation(np.concatenate(test))
    return x[train_rows], y[train_rows], x[test_rows], y[test_rows]


def _unsharded(dataset: tf.data.Dataset) -> tf.data.Dataset:
    # Each worker already holds exactly the rows it must see; TensorFlow must not
    # shard a second time.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options)


def _sharded_by_data(dataset: tf.data.Dataset) -> tf.data.Dataset:
    # Explicit DATA (not AUTO) skips TensorFlow's failed attempt at FILE sharding.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def mlp(hidden_units: int) -> keras.Model:
    """The MLP, uncompiled; build inside the strategy's scope."""
    return keras.Sequential(
        [
            keras.layers.Input(shape=(64,)),
            keras.layers.Dense(hidden_units, activation="relu"),
            keras.layers.Dense(max(hidden_units // 2, 1), activation="relu"),
            # Logits in float32 even under a mixed-precision policy, as Keras advises.
            keras.layers.Dense(10, dtype="float32"),
        ]
    )


def compile_model(model: keras.Model, learning_rate: float) -> keras.Model:
    """`model` compiled for 10-class logits; call inside the strategy's scope."""
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    # tf-keras's "auto" reduction *sums* the logged loss and metrics over the
    # replicas of a non-TPU strategy, so a 2-worker gang would report twice the
    # loss and an accuracy above 1. "first" reports the (already all-reduced)
    # value once.
    model.distribute_reduction_method = "first"
    return model


def build_model(hidden_units: int, learning_rate: float) -> keras.Model:
    """The compiled MLP; call inside the strategy's scope."""
    return compile_model(mlp(hidden_units), learning_rate)


def _backup_callbacks(ctx: TrainerContext, hp: dict[str, Any]) -> list[keras.callbacks.Callback]:
    # Step-level BackupAndRestore (workers/replica/backups.py): a restarted gang resumes
    # at the step after its last backup, and a checkpoint request is answered with one.
    every_steps = int(hp["checkpoint_every_steps"])
    if not hp["backups"]:
        return []
    if ctx.role == "chief" and every_steps:
        # Under ParameterServerStrategy it saves nothing but at epoch ends.
        warn("parameter_server backs up at each epoch end; checkpoint_every_steps is ignored")
    return [ctx.backup(every_steps)]


def train(ctx: TrainerContext) -> dict[str, float]:
    """Train the MLP on this replica's shard, evaluate on the full held-out split,
    save the model."""
    hp = {**DEFAULTS, **ctx.hyperparameters}
    return fit(ctx, hp, lambda: mlp(int(hp["hidden_units"])), (64,))


def _train_dataset(
    ctx: TrainerContext, x: np.ndarray, y: np.ndarray, global_batch: int, hp: dict[str, Any]
) -> tf.data.Dataset:
    """The training batches, in an order that depends on the seed alone, from the first
    one the step fit resumes at (the backup's, ctx.restored_step) onwards."""
    policy = ctx.distribution.shard_policy
    # Examples this worker's pipeline yields per step: tf.distribute splits each batch
    # of `global_batch` among the replicas in sync; with its own rows (sharding off)
    # a worker keeps all the pieces, one per step, with DATA sharding only its own.
    per_step = global_batch
    if policy == "auto":
        # Each worker takes its own rows of the in-memory split, so TensorFlow must
        # not shard a second time (its AUTO would fall back to DATA sharding).
        x, y = x[ctx.index :: ctx.replicas], y[ctx.index :: ctx.replicas]
        per_step = global_batch // ctx.replicas
    resumed = ctx.restored_step(int(hp["steps_per_epoch"])) if hp["backups"] else 0
    if resumed:
        announce(f"resuming after step {resumed}: skipping {resumed * per_step} examples")
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(x), seed=int(hp["seed"]))
        .repeat()
        # Skipped before batching: the same examples as an uninterrupted run's, and
        # cheap (nothing is batched or copied for the examples skipped).
        .skip(resumed * per_step)
        .batch(global_batch)
    )
    dataset = (
        _unsharded(dataset) if policy == "auto" else dataset.with_options(ctx.dataset_options())
    )
    shard = dataset.options().experimental_distribute.auto_shard_policy
    announce(f"train dataset shard_policy={policy} auto_shard_policy={shard.name}")
    return dataset


def fit(
    ctx: TrainerContext,
    hp: dict[str, Any],
    network: Callable[[], keras.Model],
    input_shape: tuple[int, ...],
) -> dict[str, float]:
    """Train `network()` (built in the strategy's scope) on the digits with the job's
    hyperparameters `hp` and distribution options; evaluate, save, return metrics."""
    if ctx.role == "chief":
        return _fit_coordinated(ctx, hp, network, input_shape)
    epochs, steps_per_epoch = int(hp["epochs"]), int(hp["steps_per_epoch"])
    batch_size, seed = int(hp["batch_size"]), int(hp["seed"])
    keras.utils.set_random_seed(seed)
    if hp["deterministic"]:
        # The same weights from the same seed, run after run and across a resume.
        tf.config.experimental.enable_op_determinism()

    x_train, y_train, x_test, y_test = load_splits(seed)
    x_train, x_test = x_train.reshape(-1, *input_shape), x_test.reshape(-1, *input_shape)

    # tf.distribute treats a dataset's batch as the GLOBAL batch and splits it
    # among all replicas in sync, so batch(batch_size) would hand each worker only
    # batch_size / replicas examples. Batching by the global size gives every
    # replica `batch_size` examples per step, taken in order from its own shard.
    global_batch = batch_size * ctx.strategy.num_replicas_in_sync
    train_ds = _train_dataset(ctx, x_train, y_train, global_batch, hp)
    # Every worker holds the same full held-out split and must take part in
    # evaluation (it runs collectives). It is deliberately NOT unsharded: Keras
    # counts eval steps in global batches, so with sharding OFF each worker would
    # stop half-way through its copy. DATA sharding gives every replica its own
    # slice of each global batch, and metric states are summed across workers, so
    # every worker reports the numbers of exactly one pass over the whole split.
    test_ds = _sharded_by_data(
        tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(global_batch)
    )

    with ctx.strategy.scope():
        model = network()
        # With gradient accumulation, `trained` applies the mean gradient of every
        # `accumulation_steps` batches; it shares `model`'s weights.
        trained = compile_model(ctx.accumulating(model), float(hp["learning_rate"]))

    backups = _backup_callbacks(ctx, hp)
    trained.fit(
        train_ds,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        callbacks=[*ctx.callbacks(global_batch), *backups],
        verbose=2,
    )
    results = trained.evaluate(test_ds, verbose=0, return_dict=True)
    announce(
        f"trained optimizer_steps={int(trained.optimizer.iterations.numpy())} "
        f"compute_dtype={model.layers[0].compute_dtype}"
    )

    _save(ctx, model)
    return {"eval_loss": float(results["loss"]), "eval_accuracy": float(results["accuracy"])}


def _save(ctx: TrainerContext, model: keras.Model) -> None:
    """Save the trained model. Saving may run collectives, so every worker saves; only
    the chief's copy is kept."""
    if ctx.is_chief:
        model.save(str(ctx.model_dir))
        return
    scratch = ctx.job_dir / "tmp" / f"worker-{ctx.index}"
    model.save(str(scratch))
    shutil.rmtree(scratch, ignore_errors=True)
    with contextlib.suppress(OSError):  # other workers may still be using it
        scratch.parent.rmdir()


def _fit_coordinated(
    ctx: TrainerContext,
    hp: dict[str, Any],
    network: Callable[[], keras.Model],
    input_shape: tuple[int, ...],
) -> dict[str, float]:
    """The chief of a parameter_server job: schedule the steps on the workers, then
    evaluate and save a local copy of the trained model."""
    epochs, steps_per_epoch = int(hp["epochs"]), int(hp["steps_per_epoch"])
    batch_size, seed = int(hp["batch_size"]), int(hp["seed"])
    keras.utils.set_random_seed(seed)
    x_train, y_train, x_test, y_test = load_splits(seed)
    x_train, x_test = x_train.reshape(-1, *input_shape), x_test.reshape(-1, *input_shape)
    global_batch = batch_size * ctx.strategy.num_replicas_in_sync
    if ctx.accumulation_steps > 1:
        warn(
            "gradient accumulation is not applied under parameter_server: every worker "
            "step updates the variables"
        )

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        # Built on each worker: one input pipeline per worker, each its own part of
        # the training split. Every step is one worker's batch.
        part = slice(context.input_pipeline_id, None, context.num_input_pipelines)
        x, y = x_train[part], y_train[part]
        return (
            tf.data.Dataset.from_tensor_slices((x, y))
            .shuffle(len(x), seed=seed + context.input_pipeline_id)
            .repeat()
            .batch(context.get_per_replica_batch_size(global_batch))
            .prefetch(2)
        )

    learning_rate = float(hp["learning_rate"])
    with ctx.strategy.scope():
        model = compile_model(network(), learning_rate)
    model.fit(
        keras.utils.experimental.DatasetCreator(dataset_fn),
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        callbacks=[
            *ctx.callbacks(global_batch),
            *_backup_callbacks(ctx, hp),
        ],
        verbose=2,
    )
    # The variables live on the ps tasks: evaluate and save a copy held here.
    local = compile_model(network(), learning_rate)
    local.set_weights(model.get_weights())
    results = local.evaluate(_test_dataset(x_test, y_test, batch_size), verbose=0, return_dict=True)
    local.save(str(ctx.model_dir))
    return {"eval_loss": float(results["loss"]), "eval_accuracy": float(results["accuracy"])}


def _test_dataset(x_test: np.ndarray, y_test: np.ndarray, batch_size: int) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(batch_size)


def evaluate_network(
    ctx: TrainerContext,
    hp: dict[str, Any],
    network: Callable[[], keras.Model],
    input_shape: tuple[int, ...],
) -> dict[str, float]:
    """The evaluator of a parameter_server job: `network()` on the held-out split, at
    each checkpoint the chief saves, until the one of the last step."""
    seed = int(hp["seed"])
    keras.utils.set_random_seed(seed)
    _, _, x_test, y_test = load_splits(seed)
    x_test = x_test.reshape(-1, *input_shape)
    model = compile_model(network(), float(hp["learning_rate"]))
    final_step = int(hp["epochs"]) * int(hp["steps_per_epoch"])
    return ctx.evaluate_checkpoints(
        model, _test_dataset(x_test, y_test, int(hp["batch_size"])), final_step
    )


def evaluate(ctx: TrainerContext) -> dict[str, float]:
    """The MLP's evaluator under parameter_server; in an evaluation job, the saved
    model's accuracy and loss on the holdout (workers/replica/trainers/holdout.py)."""
    if ctx.holdout_dir is not None:
        return evaluate_saved(ctx, (64,))
    hp = {**DEFAULTS, **ctx.hyperparameters}
    return evaluate_network(ctx, hp, lambda: mlp(int(hp["hidden_units"])), (64,))
