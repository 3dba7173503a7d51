"""The job's `distribution:` options, applied inside one replica process.

The runner applies them in a fixed order: the CPU is split into logical devices
before TensorFlow initializes its runtime (`configure_devices`), the strategy is
built, then the Keras mixed-precision policy is set before the trainer builds its
model (`apply_precision`). The rest is offered to trainers through their context
(workers/replica/trainers/__init__.py): the tf.data options carrying the shard
policy, the replica's devices for model parallelism, and gradient accumulation
(`GradientAccumulator` for custom loops, `accumulating` for Keras `fit`).

TensorFlow is imported inside the functions, so importing this module is cheap.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from services.wire.replica import DistributionOptions
from workers.replica.callbacks import announce

_SHARD_POLICIES = {"auto": "AUTO", "file": "FILE", "data": "DATA", "off": "OFF"}


def configure_devices(distribution: DistributionOptions) -> None:
    """Split the CPU into `cpu_devices` logical devices (mirrored or model parallelism
    on a machine without GPUs). Must run before TensorFlow's runtime starts: once any
    op has run the split is impossible, and a second call is a no-op."""
    if not distribution.cpu_devices or distribution.cpu_devices == 1:
        return
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    wanted = [tf.config.LogicalDeviceConfiguration()] * distribution.cpu_devices
    if tf.config.get_logical_device_configuration(cpu) == wanted:
        return
    tf.config.set_logical_device_configuration(cpu, wanted)


def apply_precision(distribution: DistributionOptions) -> None:
    """Set the Keras global mixed-precision policy, before any model is built.

    Layers built afterwards compute in float16/bfloat16 and keep float32 variables;
    `model.compile` then wraps the optimizer in a LossScaleOptimizer under
    `mixed_float16` (dynamic loss scaling, as Keras does it); bfloat16 needs none.
    """
    if distribution.mixed_precision is None:
        return
    import tf_keras as keras

    keras.mixed_precision.set_global_policy(distribution.mixed_precision)
    announce(f"mixed_precision={distribution.mixed_precision}")


def replica_devices(distribution: DistributionOptions) -> list[str]:
    """The logical devices one replica spreads its model over (model parallelism):
    the first `devices_per_replica` GPUs, or CPUs when there are no GPUs."""
    import tensorflow as tf

    devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    wanted = distribution.devices_per_replica
    if len(devices) < wanted:
        raise RuntimeError(
            f"devices_per_replica={wanted} but this replica has {len(devices)} "
            f"device(s) ({', '.join(d.name for d in devices)}); on CPU set "
            f"distribution.cpu_devices to at least {wanted}"
        )
    return [device.name for device in devices[:wanted]]


def dataset_options(distribution: DistributionOptions) -> Any:
    """`tf.data.Options` with the job's AutoShardPolicy, for `dataset.with_options`."""
    import tensorflow as tf

    options = tf.data.Options()
    policy = getattr(
        tf.data.experimental.AutoShardPolicy, _SHARD_POLICIES[distribution.shard_policy]
    )
    options.experimental_distribute.auto_shard_policy = policy
    return options


class GradientAccumulator:
    """Sums a replica's gradients over `steps` micro-batches, then applies their mean.

    The effective batch is `steps` x the global batch: with a loss that averages over
    its batch, `steps` micro-steps give the weights one step of the `steps`-times
    batch would. Create it inside `strategy.scope()`; the sums are per-replica
    (sync-on-read) variables, so adding to them needs no communication; gradients
    are all-reduced only when the optimizer applies them.

    In a custom loop, call `add(gradients)` inside the step `strategy.run` runs, and
    `apply(optimizer)` (also inside `strategy.run`) every `steps` steps; or let
    `step(optimizer, gradients, micro_step)` decide inside a `tf.function`.
    """

    def __init__(self, variables: Sequence[Any], steps: int) -> None:
        import tensorflow as tf

        if steps < 1:
            raise ValueError(f"steps must be at least 1, got {steps}")
        self.steps = steps
        self.variables = list(variables)
        self.sums = [
            tf.Variable(
                tf.zeros(variable.shape, variable.dtype),
                trainable=False,
                name=f"accumulated/{variable.name.split(':')[0]}",
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.SUM,
            )
            for variable in self.variables
        ]

    def add(self, gradients: Sequence[Any]) -> None:
        """Add one micro-batch's gradients (replica context)."""
        import tensorflow as tf

        for total, gradient in zip(self.sums, gradients, strict=True):
            if gradient is not None:
                total.assign_add(tf.convert_to_tensor(gradient), read_value=False)

    def gradients(self) -> list[Any]:
        """This replica's mean gradient over the micro-batches (replica context)."""
        return [total.read_value() / self.steps for total in self.sums]

    def reset(self) -> None:
        import tensorflow as tf

        for total in self.sums:
            total.assign(tf.zeros_like(total), read_value=False)

    def apply(self, optimizer: Any) -> None:
        """Apply the mean gradient (all-reduced by the optimizer) and start over."""
        optimizer.apply_gradients(zip(self.gradients(), self.variables, strict=True))
        self.reset()

    def step(self, optimizer: Any, gradients: Sequence[Any], micro_step: Any) -> None:
        """Add `gradients`; apply when `micro_step` (1-based, a tensor) completes a
        group of `steps`. Call inside `strategy.run` (replica context)."""
        import tensorflow as tf

        self.add(gradients)
        should_apply = tf.equal(tf.math.floormod(micro_step, self.steps), 0)
        _maybe(should_apply, lambda: self.apply(optimizer))


def _maybe(predicate: Any, fn: Any) -> None:
    """Run `fn` (which may all-reduce) in replica context when `predicate` holds.

    Strategies that synchronize through `merge_call` (Mirrored) refuse a replica-
    context `cond` whose branch calls it, so for them the `cond` runs in cross-replica
    context and re-enters each replica, as Keras's LossScaleOptimizer does. The
    predicate must be the same on every replica.
    """
    import tensorflow as tf

    def nothing() -> None:
        return None

    if tf.__internal__.distribute.strategy_supports_no_merge_call():
        tf.__internal__.smart_cond.smart_cond(predicate, fn, nothing)
        return

    def cross_replica(distribution: Any) -> None:
        tf.__internal__.smart_cond.smart_cond(
            predicate, lambda: distribution.extended.call_for_each_replica(fn), nothing
        )

    tf.distribute.get_replica_context().merge_call(cross_replica)


def accumulating(model: Any, steps: int) -> Any:
    """`model` (built, not yet compiled) as a Keras model whose `fit` applies the mean
    gradient of every `steps` batches; `model` itself when `steps` is 1.

    Call inside `strategy.scope()`. The returned model shares `model`'s layers and
    weights, so saving `model` after training saves the trained weights.
    """
    if steps == 1:
        return model
    if not getattr(model, "inputs", None):
        raise TypeError(
            "gradient accumulation wraps a Sequential or functional model with known "
            "inputs; a subclassed model can use ctx.gradient_accumulator() in its own "
            "train_step or loop"
        )
    return _accumulating_class()(
        inputs=model.inputs,
        outputs=model.outputs,
        accumulation_steps=steps,
        name=f"{model.name}_accumulating",
    )


@functools.cache
def _accumulating_class() -> type:
    import tensorflow as tf
    import tf_keras as keras

    class AccumulatingModel(keras.Model):  # type: ignore[misc]  # tf_keras has no types
        """A functional model whose train step accumulates gradients (see `accumulating`)."""

        def __init__(self, *args: Any, accumulation_steps: int, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.accumulator = GradientAccumulator(self.trainable_variables, accumulation_steps)
            # Micro-steps taken, kept with the weights so a restored model stays in step.
            self.micro_steps = tf.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                name="micro_steps",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )

        def train_step(self, data: Any) -> Any:
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(x, y, y_pred, sample_weight)
            # A LossScaleOptimizer (mixed_float16) scales the loss and unscales the
            # gradients here; a plain optimizer just takes the gradients.
            grads_and_vars = self.optimizer.compute_gradients(
                loss, self.trainable_variables, tape=tape
            )
            self.micro_steps.assign_add(1)
            self.accumulator.step(self.optimizer, [g for g, _ in grads_and_vars], self.micro_steps)
            return self.compute_metrics(x, y, y_pred, sample_weight)

    return AccumulatingModel
