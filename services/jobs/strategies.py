"""Which job options fit which strategy: the one place that decides, before a job is stored.

The schema (services/jobs/schemas.py) checks each option's own shape; the rules here
look at several fields together and refuse with `InvalidJobSpec` naming the field.

* `one_device`, `mirrored`: one replica (mirrored uses every device given to that
  process: `gpus_per_replica: 4` is 4 GPUs in one process).
* `multi_worker_mirrored`: N replicas, all `worker`s.
* `parameter_server`: `roles` required, and the gang is their sum: `replicas`, if
  given, must equal it. `roles` and `role_placement` belong to this strategy only.
* `distribution.communication`: MultiWorkerMirrored's CommunicationOptions
  (auto|ring|nccl) or Mirrored's cross_device_ops (auto|nccl|hierarchical_copy|
  reduce_to_one); the other strategies have no choice (auto). `nccl` needs GPUs.
* `distribution.gradient_accumulation_steps` > 1 does not fit parameter_server: its
  workers apply each step's gradients on the ps asynchronously, with nothing to sum.
* `distribution.shard_policy`: `file` needs a file-based dataset, which the built-in
  trainers (data in memory) do not have; parameter_server takes only `auto` (its workers
  are fed by the chief's dataset function).
* `distribution.cpu_devices` splits a process's CPU into logical devices: for the
  one-process strategies (mirrored, one_device: data or model parallelism on CPU),
  and never with GPUs, which are the devices then.
* `distribution.devices_per_replica` (model parallelism) must fit the replica's
  devices: its GPUs, else its logical CPUs (1 unless `cpu_devices`).
* `profile.replicas` must name replicas of the gang. Not under parameter_server: its
  chief only schedules steps onto the workers (Keras runs no per-step hooks there) and
  the workers run TensorFlow servers, not a loop Cohort can bracket.
"""

from __future__ import annotations

from services.exceptions import InvalidJobSpec
from services.jobs.schemas import JobCreate
from services.jobs.trainers import BUILTIN_TRAINERS

SINGLE_REPLICA_STRATEGIES = frozenset({"mirrored", "one_device"})
COMMUNICATION: dict[str, frozenset[str]] = {
    "multi_worker_mirrored": frozenset({"auto", "ring", "nccl"}),
    "mirrored": frozenset({"auto", "nccl", "hierarchical_copy", "reduce_to_one"}),
    "one_device": frozenset({"auto"}),
    "parameter_server": frozenset({"auto"}),
}


def check_strategy_options(job_in: JobCreate) -> None:
    """Refuse a spec whose options do not fit its strategy (see the module's rules).

    Raises:
        InvalidJobSpec: naming the first field that does not fit.
    """
    _check_gang(job_in)
    _check_distribution(job_in)
    if job_in.profile is not None and job_in.strategy == "parameter_server":
        raise InvalidJobSpec(
            "profile",
            "parameter_server cannot be profiled by step range (the chief "
            "schedules steps, the workers run servers); remove `profile`, or profile the "
            "same model under multi_worker_mirrored",
        )
    if job_in.profile is not None:
        outside = [i for i in job_in.profile.replicas if i >= job_in.replicas]
        if outside:
            raise InvalidJobSpec(
                "profile.replicas",
                f"replica {outside[0]} is not in a gang of "
                f"{job_in.replicas} (indexes 0..{job_in.replicas - 1}; 0 is the chief)",
            )


def _check_gang(job_in: JobCreate) -> None:
    strategy = job_in.strategy
    if strategy == "parameter_server":
        if job_in.roles is None:
            raise InvalidJobSpec(
                "roles",
                "parameter_server needs its roles, e.g. {chief: 1, worker: 2, ps: 1, evaluator: 1}",
            )
        if job_in.replicas != job_in.roles.total:
            raise InvalidJobSpec(
                "replicas",
                f"{job_in.replicas} replicas, but the roles add up to "
                f"{job_in.roles.total}: leave `replicas` out (it is the roles' sum)",
            )
        return
    for field in ("roles", "role_placement"):
        if getattr(job_in, field) is not None:
            raise InvalidJobSpec(
                field,
                f"only a parameter_server job has {field}; remove it or set "
                "strategy: parameter_server",
            )
    if strategy in SINGLE_REPLICA_STRATEGIES and job_in.replicas != 1:
        raise InvalidJobSpec(
            "replicas",
            f"strategy {strategy!r} runs one replica; set replicas to 1 or use "
            "'multi_worker_mirrored'",
        )


def _check_distribution(job_in: JobCreate) -> None:
    options, strategy, gpus = job_in.distribution, job_in.strategy, job_in.gpus_per_replica
    allowed = COMMUNICATION[strategy]
    if options.communication not in allowed:
        raise InvalidJobSpec(
            "distribution.communication",
            f"{options.communication!r} does not fit "
            f"{strategy}; use {' or '.join(sorted(allowed))}",
        )
    if options.communication == "nccl" and not gpus:
        raise InvalidJobSpec(
            "distribution.communication",
            "nccl runs on GPUs: set gpus_per_replica, or use 'auto' or 'ring' on CPUs",
        )
    if options.gradient_accumulation_steps > 1 and strategy == "parameter_server":
        raise InvalidJobSpec(
            "distribution.gradient_accumulation_steps",
            "parameter_server workers apply "
            "each step's gradients asynchronously; leave it at 1 or raise batch_size",
        )
    if options.shard_policy != "auto" and strategy == "parameter_server":
        raise InvalidJobSpec(
            "distribution.shard_policy",
            "parameter_server workers take batches from the "
            "chief's dataset function, not a sharded dataset; leave it at 'auto'",
        )
    if options.shard_policy == "file" and job_in.trainer in BUILTIN_TRAINERS:
        raise InvalidJobSpec(
            "distribution.shard_policy",
            f"{job_in.trainer} reads its data from memory, "
            "which cannot be sharded by file; use 'data', 'off' or 'auto'",
        )
    if options.cpu_devices is not None:
        if strategy not in SINGLE_REPLICA_STRATEGIES:
            raise InvalidJobSpec(
                "distribution.cpu_devices",
                "logical CPU devices are for mirrored and "
                f"one_device (one process); {strategy} spreads over replicas instead",
            )
        if gpus:
            raise InvalidJobSpec(
                "distribution.cpu_devices",
                "a replica with GPUs uses them as its "
                "devices; remove cpu_devices or gpus_per_replica",
            )
    devices = gpus or options.cpu_devices or 1
    if options.devices_per_replica > devices:
        raise InvalidJobSpec(
            "distribution.devices_per_replica",
            f"{options.devices_per_replica} devices, "
            f"but each replica has {devices}: raise gpus_per_replica (or cpu_devices on CPU)",
        )
