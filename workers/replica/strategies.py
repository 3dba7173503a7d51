"""The tf.distribute strategy a replica builds for its job's `strategy`, with the job's
distribution options (communication, devices), once TF_CONFIG is in its environment.
TensorFlow is imported inside each function: the runner starts before it may be."""

from __future__ import annotations

import os
from typing import Any

from services.wire.replica import DistributionOptions, ReplicaSpec
from workers.replica import roles
from workers.replica.callbacks import announce


class ConfigError(ValueError):
    """COHORT_REPLICA_SPEC or another required variable is missing or malformed."""


def build_strategy(spec: ReplicaSpec) -> Any:
    """The tf.distribute strategy of this replica (TF_CONFIG must already be in the env).

    Under parameter_server only the chief builds one (the coordinator's); the
    evaluator, outside the training cluster, gets TensorFlow's default strategy.
    """
    import tensorflow as tf

    name = spec.strategy
    if name != "parameter_server" and spec.role != "worker":
        raise ConfigError(f"strategy {name!r} runs workers only, not a {spec.role!r}")
    if name == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=_communication_options(spec.distribution.communication)
        )
    if name == "mirrored":
        return _mirrored_strategy(spec.distribution)
    if name == "one_device":
        device = "/gpu:0" if tf.config.list_physical_devices("GPU") else "/cpu:0"
        return tf.distribute.OneDeviceStrategy(device)
    if name == "parameter_server":
        if spec.role == "evaluator":
            return tf.distribute.get_strategy()
        if spec.role == "chief":
            return _parameter_server_strategy(spec)
        raise ConfigError(f"a parameter_server {spec.role!r} serves, it builds no strategy")
    raise ConfigError(f"unknown strategy {name!r}")


def _communication_options(communication: str) -> Any:
    """MultiWorkerMirrored's collective implementation (`auto` lets TensorFlow choose:
    NCCL on GPUs, ring otherwise)."""
    import tensorflow as tf

    implementations = tf.distribute.experimental.CommunicationImplementation
    choices = {
        "auto": implementations.AUTO,
        "ring": implementations.RING,
        "nccl": implementations.NCCL,
    }
    if communication not in choices:
        raise ConfigError(
            f"communication {communication!r} is not one of "
            f"multi_worker_mirrored's ({', '.join(choices)})"
        )
    announce(f"multi_worker_mirrored communication={choices[communication].name}")
    return tf.distribute.experimental.CommunicationOptions(implementation=choices[communication])


def _mirrored_strategy(options: DistributionOptions) -> Any:
    """One process over all of its GPUs, or over its logical CPU devices (`cpu_devices`,
    split by distribution.configure_devices before TensorFlow started)."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    devices = None  # TensorFlow's default: every visible GPU
    if not gpus:
        devices = [device.name for device in tf.config.list_logical_devices("CPU")]
    ops = {
        "nccl": tf.distribute.NcclAllReduce,
        "hierarchical_copy": tf.distribute.HierarchicalCopyAllReduce,
        "reduce_to_one": tf.distribute.ReductionToOneDevice,
    }
    if options.communication == "auto":
        # On GPUs TensorFlow picks NCCL where it can; NCCL needs GPUs, so on CPU
        # the variables' updates are reduced on one device.
        cross_device_ops = None if gpus else tf.distribute.ReductionToOneDevice()
    elif options.communication in ops:
        cross_device_ops = ops[options.communication]()
    else:
        raise ConfigError(
            f"communication {options.communication!r} is not one of "
            f"mirrored's (auto, {', '.join(ops)})"
        )
    announce(
        f"mirrored devices={devices or [gpu.name for gpu in gpus]} "
        f"cross_device_ops={type(cross_device_ops).__name__ if cross_device_ops else 'auto'}"
    )
    return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=cross_device_ops)


def _parameter_server_strategy(spec: ReplicaSpec) -> Any:
    """The chief's ParameterServerStrategy over the cluster TF_CONFIG names."""
    import tensorflow as tf

    roles.check_task(spec)
    # The coordinator's RPCs fail at once when a worker is gone, so it reschedules the
    # closure elsewhere instead of waiting (TensorFlow's advice for the coordinator).
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    shards = len(resolver.cluster_spec().as_dict().get("ps", []))
    # Variables of 256 KiB or more are split across the ps tasks (large embeddings);
    # smaller ones stay whole on one ps each.
    partitioner = (
        tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=256 << 10, max_shards=shards
        )
        if shards > 1
        else None
    )
    return tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=partitioner
    )
