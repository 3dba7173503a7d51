"""Step-level backups, exact resume and "checkpoint now" for trainers that use `model.fit`.

`backup_callback` is tf-keras' `BackupAndRestore` saving every N steps (`save_freq`
an int, so a restore resumes at the step after the backup, not at the epoch's start),
and also under OneDeviceStrategy, which tf-keras refuses though its training state
works there as under MirroredStrategy (one process, `should_checkpoint`).

A restore brings back the model, its optimizer and fit's epoch and step, but not the
input pipeline's position: fit builds its iterator itself, so it cannot be put in the
checkpoint. The trainer's input order is a seeded, deterministic function of the
step instead, and `restored_step` says how many steps to skip before fit starts.

Checkpoint now: `install_checkpoint_signal` (the runner, first thing) makes SIGUSR1
only set a flag. The callback looks at it at step boundaries; under a multi-worker
MultiWorkerMirroredStrategy every DECISION_STEPS steps, through an all-reduce of every
worker's flag, so that the workers, which each see only their own signal, agree on
the same step. Then every replica saves the step-level backup at that step and
exits CHECKPOINTED (services/exit_codes.py): a signal to ONE worker of a gang is
enough. TensorFlow is imported only when a callback is built.
"""

from __future__ import annotations

import functools
import signal
from pathlib import Path
from types import FrameType
from typing import Any

from services import exit_codes
from workers.replica.callbacks import announce
from workers.replica.signal_flags import SignalFlag

CHECKPOINT_SIGNAL = signal.SIGUSR1

# Under a multi-worker gang the workers agree on a checkpoint request every this many
# steps: one all-reduce of a scalar (3 ms a decision for a 2-worker gang on loopback on a
# loaded 2-core VM: 0.15 ms a step, under 1% of that gang's ~16 ms MLP step). A request
# waits at most this many steps; none of them is redone.
DECISION_STEPS = 20

# Steps between two backups when the job does not say (`checkpoint_every_steps`), besides
# one at each epoch end: the most work a killed gang redoes. A backup costs a fixed
# 0.15-0.7 s (TensorFlow walks the model's object graph and writes its files) while the
# built-in MLP's step takes 2-10 ms on the loaded 2-core VM, some 70-100 steps' worth:
# 5,000 steps keep that within 2% of its steady step time (docs/benchmarks.md,
# step-level backups). A model with longer steps can back up more often for the same.
DEFAULT_BACKUP_STEPS = 5000

_requested = SignalFlag()  # set by the SIGUSR1 handler: no lock (signal_flags.py)


class CheckpointedExit(SystemExit):
    """Raised out of `model.fit` once the replica saved its backup on request: the
    runner exits with its code, CHECKPOINTED."""

    def __init__(self) -> None:
        super().__init__(exit_codes.CHECKPOINTED)


def _on_checkpoint_signal(_signum: int, _frame: FrameType | None) -> None:
    # Only a flag: the signal may come in the middle of a step, or of a collective.
    _requested.set()


def install_checkpoint_signal() -> None:
    """Make SIGUSR1 ask for a checkpoint instead of ending the process."""
    signal.signal(CHECKPOINT_SIGNAL, _on_checkpoint_signal)


def checkpoint_requested() -> bool:
    """Whether this process was asked to checkpoint now (SIGUSR1)."""
    return _requested.is_set()


def restored_step(checkpoint_dir: Path, steps_per_epoch: int) -> int:
    """The global step the backup in `checkpoint_dir` was taken after (0: no backup),
    where fit will resume; read without building the model."""
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(str(checkpoint_dir / "chief"))
    if latest is None:
        return 0
    reader = tf.train.load_checkpoint(latest)
    epoch = int(reader.get_tensor("ckpt_saved_epoch/.ATTRIBUTES/VARIABLE_VALUE"))
    batch = int(reader.get_tensor("ckpt_saved_batch/.ATTRIBUTES/VARIABLE_VALUE"))
    if epoch < 0 or batch < 0:
        return 0
    return epoch * steps_per_epoch + batch + 1


def backup_callback(
    checkpoint_dir: Path, every_steps: int, *, multi_worker: bool, coordinated: bool = False
) -> Any:
    """The step-level BackupAndRestore of a trainer's `model.fit`, which also answers
    a checkpoint request. `multi_worker`: the replicas of a multi-worker gang must
    agree on the step (an all-reduce); `coordinated`: a ParameterServerStrategy chief,
    whose backups tf-keras takes at epoch ends only."""
    return _backup_class()(
        str(checkpoint_dir),
        "epoch" if coordinated or not every_steps else every_steps,
        decide_every=DECISION_STEPS if multi_worker else 1,
        at_epoch_end=coordinated,
    )


class _CheckpointOnRequest:
    """The hooks `StepBackup` adds to BackupAndRestore (made by `_backup_class`, so that
    importing this module never loads TensorFlow)."""

    model: Any  # set by Keras
    params: Any
    save_freq: Any
    _batches_count: int
    _current_epoch: int

    def __init__(
        self, backup_dir: str, save_freq: Any, *, decide_every: int, at_epoch_end: bool
    ) -> None:
        super().__init__(backup_dir=backup_dir, save_freq=save_freq)  # type: ignore[call-arg]
        import tensorflow as tf

        # Its training state (one process that checkpoints) works there as under
        # MirroredStrategy; tf-keras only leaves it off its list.
        self._supported_strategies = (
            *self._supported_strategies,  # type: ignore[has-type]
            tf.distribute.OneDeviceStrategy,
        )
        self._decide_every = decide_every
        # A ParameterServerStrategy chief's steps are closures still in flight on the
        # workers at a step boundary: it answers at the epoch's end, after its backup.
        self._at_epoch_end = at_epoch_end
        self._steps = 0  # steps run by this fit, the same count on every worker
        self._batch = -1  # the batch of the epoch under way
        self._agree: Any = None

    def on_train_begin(self, logs: Any = None) -> None:
        steps_per_epoch = (self.params or {}).get("steps")
        if self.save_freq == "epoch" and not self._at_epoch_end:
            if steps_per_epoch:
                # Backups at epoch ends, counted in steps: a backup taken on request
                # mid-epoch must resume at its step, which tf-keras does for an int only.
                self.save_freq = steps_per_epoch
            else:  # epochs of unknown length: requests are answered at their ends
                self._at_epoch_end = True
        super().on_train_begin(logs)  # type: ignore[misc]
        if self._decide_every > 1:
            self._agree = _agreement(self.model.distribute_strategy)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        # tf-keras assigns the batch to a variable here, an eager op every step; it is
        # only read when a backup is taken, so it is assigned then (`_backup`).
        self._batch = batch

    def _backup(self, epoch: int, batch: int = 0) -> None:
        if not self._at_epoch_end:  # tf-keras leaves it unset under ParameterServerStrategy
            self._training_state._ckpt_saved_batch.assign(self._batch)  # type: ignore[attr-defined]
        super()._backup(epoch, batch)  # type: ignore[misc]

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        super().on_train_batch_end(batch, logs)  # type: ignore[misc]
        self._steps += 1
        if self._at_epoch_end or self._steps % self._decide_every:
            return
        if not self._requested_by_any():
            return
        just_saved = isinstance(self.save_freq, int) and self._batches_count == 0
        if not just_saved:
            self._backup(epoch=self._current_epoch, batch=batch)
        self._exit_checkpointed(self._current_epoch, batch)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        super().on_epoch_end(epoch, logs)  # type: ignore[misc]
        if isinstance(self.save_freq, int) and self._batches_count:
            # Every epoch end is backed up too, as when backups were taken per epoch:
            # an epoch that is not a whole number of intervals, or a resumed one.
            self._batches_count = 0
            self._backup(epoch=epoch)
        if self._at_epoch_end and _requested.is_set():
            self._exit_checkpointed(epoch, (self.params or {}).get("steps", 1) - 1)

    def _exit_checkpointed(self, epoch: int, batch: int) -> None:
        steps_per_epoch = (self.params or {}).get("steps") or 0
        step = epoch * steps_per_epoch + batch + 1
        announce(f"checkpointed step={step} on request; exiting {exit_codes.CHECKPOINTED}")
        raise CheckpointedExit

    def _requested_by_any(self) -> bool:
        if self._agree is None:
            return _requested.is_set()
        import tensorflow as tf

        flag = tf.constant(1.0 if _requested.is_set() else 0.0)
        return bool(self._agree(flag).numpy() > 0)


def _agreement(strategy: Any) -> Any:
    """A function summing every replica's flag over the gang (an all-reduce)."""
    import tensorflow as tf

    def replica_sum(flag: Any) -> Any:
        context = tf.distribute.get_replica_context()
        # On the replica's device: an all-reduce of a value placed nowhere has no
        # destinations to reduce to.
        return context.all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(flag))

    def run_all(flag: Any) -> Any:
        return strategy.run(replica_sum, args=(flag,))

    agree = tf.function(run_all)

    def total(flag: Any) -> Any:
        return strategy.experimental_local_results(agree(flag))[0]

    return total


@functools.cache
def _backup_class() -> type:
    import tf_keras as keras

    class StepBackup(_CheckpointOnRequest, keras.callbacks.BackupAndRestore):  # type: ignore[misc]  # tf_keras has no types
        __doc__ = _CheckpointOnRequest.__doc__

    return StepBackup
