"""Trainer registry and the context a replica hands to its trainer.

    mlp_digits.py  built-in `mlp_digits`: a small MLP on scikit-learn's 8x8 digits
    cnn_digits.py  built-in `cnn_digits`: a small conv net on the same digits as images
    holdout.py     the built-ins' evaluation job: a saved model on a holdout of digits

A trainer is a function `train(ctx: TrainerContext) -> dict[str, float]` that
builds its model inside `ctx.strategy.scope()`, passes `ctx.callbacks()` to
`model.fit` and returns its final metrics. Built-ins are named here; anything
else is addressed as "module:function". This module imports neither TensorFlow
nor Redis; the built-in names live in services.jobs.trainers.

The job's `distribution:` options reach the trainer here: `dataset_options()` (the
shard policy), `devices` (model parallelism), `accumulating(model)` and
`gradient_accumulator(variables)` (gradient accumulation); the mixed-precision policy
is already set when the trainer runs. A `profile:` range is captured by the callback
in `callbacks()`, or by `profiler.step(n)` in a custom loop.

Under `parameter_server` only the chief runs `train`; the runner serves the
`worker` and `ps` roles itself (workers/replica/roles.py), and an `evaluator`
runs the trainer module's `evaluate(ctx)` if it has one (see `load_evaluator`).
An evaluation job (a schedule's `evaluate:`) runs that same `evaluate(ctx)` as a
`worker`, with `ctx.holdout_dir` set and `ctx.model_dir` holding the saved model to
judge; it returns the metrics (workers/replica/evaluation_job.py).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

# One registry for the control plane (which checks job specs) and the replicas.
from services.jobs.trainers import BUILTIN_TRAINERS
from services.wire.replica import DistributionOptions, Profile

if TYPE_CHECKING:
    from workers.replica.callbacks import ReplicaReporter
    from workers.replica.distribution import GradientAccumulator
    from workers.replica.profiling import StepProfiler

# Per-replica batch size when the job does not set `batch_size`.
DEFAULT_BATCH_SIZE = 32

_DOTTED_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")

Trainer = Callable[["TrainerContext"], Mapping[str, Any]]


class UnknownTrainerError(LookupError):
    """The trainer name is neither a built-in nor an importable "module:function"."""


@dataclass
class TrainerContext:
    """Everything a trainer needs to know about its job and replica."""

    strategy: Any  # tf.distribute.Strategy; typed loosely to keep TensorFlow out of this module
    job_id: int
    attempt: int
    index: int
    replicas: int
    hyperparameters: dict[str, Any]
    job_dir: Path  # the job's directory on this node, shared by its replicas here
    reporter: ReplicaReporter
    work_dir: Path  # this replica's own directory (its copy of the bundle is work_dir/code)
    checkpoint_dir: Path  # BackupAndRestore's backup_dir; synced to the store
    model_dir: Path  # where the chief saves the trained model
    tensorboard_dir: Path  # this replica's TensorBoard event files
    input_dir: Path  # the job's input files, fetched from the store
    # An evaluation job's holdout (COHORT_HOLDOUT_DIR); model_dir is then the evaluated
    # model, read-only. None in every other job.
    holdout_dir: Path | None = None
    distribution: DistributionOptions = field(default_factory=DistributionOptions)
    profile: Profile | None = None  # the steps to profile on this replica, if any
    # The process's part in its gang: `worker` for every strategy but
    # parameter_server, where the trainer runs as `chief` and a sidecar as `evaluator`.
    role: str = "worker"
    role_index: int = 0  # its index among the processes of its role
    is_chief: bool = field(init=False)
    profiler: StepProfiler = field(init=False)  # `with ctx.profiler.step(n):` in a loop

    def __post_init__(self) -> None:
        from workers.replica.profiling import StepProfiler

        # A parameter_server gang has a `chief`; in the others worker 0 is the chief.
        self.is_chief = self.role == "chief" or (self.role == "worker" and self.index == 0)
        self.profiler = StepProfiler(self.profile, self.tensorboard_dir)

    @property
    def global_batch_size(self) -> int:
        """Examples per training step across all replicas (`batch_size` per replica)."""
        per_replica = int(self.hyperparameters.get("batch_size", DEFAULT_BATCH_SIZE))
        return per_replica * int(self.strategy.num_replicas_in_sync)

    @property
    def accumulation_steps(self) -> int:
        """Micro-batches per optimizer step (`gradient_accumulation_steps`)."""
        return self.distribution.gradient_accumulation_steps

    def callbacks(self, global_batch_size: int | None = None) -> list[Any]:
        """The Keras callbacks every trainer passes to `model.fit`: metrics reporting,
        and the profiler when this replica profiles."""
        from workers.replica.callbacks import metrics_callback
        from workers.replica.profiling import profiler_callback

        # Only a parameter_server gang has a chief; its steps run on the workers.
        coordinated = self.role == "chief"
        callbacks = [
            metrics_callback(
                self.reporter, global_batch_size or self.global_batch_size, coordinated=coordinated
            )
        ]
        if self.profile is not None:
            callbacks.append(profiler_callback(self.profiler))
        if coordinated:
            from workers.replica.roles import evaluator_checkpoints

            callbacks.append(evaluator_checkpoints(self.evaluation_dir))
        return callbacks

    def backup(self, every_steps: int | None = None) -> Any:
        """The step-level `BackupAndRestore` callback for `model.fit`, backing up to
        `checkpoint_dir` every `every_steps` steps (None: the default; 0: at epoch ends)
        and answering "checkpoint now" (SIGUSR1) by saving and exiting 75
        (workers/replica/backups.py). Skip `restored_step(...)` steps of your input."""
        from workers.replica.backups import DEFAULT_BACKUP_STEPS, backup_callback

        return backup_callback(
            self.checkpoint_dir,
            DEFAULT_BACKUP_STEPS if every_steps is None else every_steps,
            multi_worker=self.replicas > 1 and self.role == "worker",
            coordinated=self.role == "chief",
        )

    def restored_step(self, steps_per_epoch: int) -> int:
        """The step `backup()` will resume `model.fit` after (0: none): the input must
        start that many steps in, where an uninterrupted run would be."""
        from workers.replica.backups import restored_step

        return restored_step(self.checkpoint_dir, steps_per_epoch)

    @property
    def evaluation_dir(self) -> Path:
        """Where the chief of a parameter_server job saves a checkpoint at each epoch
        end for the evaluator (on the chief's node, which the evaluator shares)."""
        return self.checkpoint_dir / "evaluator"

    def evaluate_checkpoints(
        self, model: Any, data: Any, final_step: int, steps: int | None = None
    ) -> dict[str, float]:
        """The evaluator's loop: evaluate `model` on `data` for each new checkpoint of
        the chief, report `eval_*` at the checkpoint's step, and return once the
        checkpoint of `final_step` is evaluated (workers/replica/roles.py)."""
        from workers.replica.roles import evaluate_checkpoints

        return evaluate_checkpoints(self, model, data, final_step, steps=steps)

    def dataset_options(self) -> Any:
        """`tf.data.Options` with the job's shard policy: `dataset.with_options(...)`."""
        from workers.replica.distribution import dataset_options

        return dataset_options(self.distribution)

    @property
    def devices(self) -> list[str]:
        """The `devices_per_replica` logical devices this replica may place its model's
        parts on (`with tf.device(ctx.devices[1]): ...`)."""
        from workers.replica.distribution import replica_devices

        return replica_devices(self.distribution)

    def accumulating(self, model: Any) -> Any:
        """`model` (built inside `strategy.scope()`, not compiled) with `fit` applying
        the mean gradient of every `accumulation_steps` batches; `model` itself when
        there is no accumulation. Compile and fit the returned model, save `model`."""
        from workers.replica.distribution import accumulating

        return accumulating(model, self.accumulation_steps)

    def gradient_accumulator(self, variables: Any) -> GradientAccumulator:
        """A `GradientAccumulator` over `variables` for a custom loop (create it inside
        `strategy.scope()`)."""
        from workers.replica.distribution import GradientAccumulator

        return GradientAccumulator(variables, self.accumulation_steps)


def parse_trainer_name(name: str) -> tuple[str, str]:
    """Split a trainer name into (module, attribute) without importing anything."""
    target = BUILTIN_TRAINERS.get(name, name)
    module_name, sep, attribute = target.partition(":")
    if not sep or not _DOTTED_NAME.match(module_name) or not _DOTTED_NAME.match(attribute):
        builtins = ", ".join(sorted(BUILTIN_TRAINERS))
        raise UnknownTrainerError(
            f"unknown trainer {name!r}: not a built-in ({builtins}) "
            "and not of the form 'module:function'"
        )
    return module_name, attribute


def load_trainer(name: str) -> Trainer:
    """Resolve a built-in name or "module:function" to the trainer function."""
    module_name, attribute = parse_trainer_name(name)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only a missing trainer module is "unknown"; a trainer whose own imports
        # fail is broken and the error must surface as it is.
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise UnknownTrainerError(
                f"unknown trainer {name!r}: no module {module_name!r}"
            ) from exc
        raise
    target: Any = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise UnknownTrainerError(
                f"unknown trainer {name!r}: {module_name!r} has no {attribute!r}"
            )
    if not callable(target):
        raise UnknownTrainerError(
            f"unknown trainer {name!r}: {module_name}:{attribute} is not callable"
        )
    trainer: Callable[[TrainerContext], Mapping[str, Any]] = target  # the module's, unchecked
    return trainer


Evaluator = Callable[["TrainerContext"], Mapping[str, Any] | None]


def load_evaluator(name: str) -> Evaluator | None:
    """The `evaluate(ctx)` function next to trainer `name` in its module (what a
    parameter_server evaluator runs), or None if the module has none."""
    load_trainer(name)  # the same errors for a missing module or function
    module = importlib.import_module(parse_trainer_name(name)[0])
    evaluate = getattr(module, "evaluate", None)
    return evaluate if callable(evaluate) else None
