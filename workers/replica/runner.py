"""One training replica: `python -m workers.replica.runner`, spawned by the node agent.

Reads its spec from the file `COHORT_REPLICA_SPEC` names (a ReplicaLaunch,
services/wire/replica.py; and `TF_CONFIG` for multi-worker jobs),
builds the tf.distribute strategy, runs the trainer with a `TrainerContext`
and reports its metrics, progress and final metrics in the replica's metrics file
(COHORT_METRICS_FILE), which the agent follows and ships: a replica holds no Redis
credentials.
Under parameter_server the role decides (workers/replica/roles.py): `worker` and
`ps` serve the cluster, the `chief` trains, the `evaluator` evaluates checkpoints.

Exit codes: 0 success, 1 the trainer failed, 2 bad configuration or unknown trainer,
28 a write failed for want of space on DATA_DIR (services/exit_codes.py NO_SPACE), 75
checkpointed on request (SIGUSR1, backups.py), 78 given GPUs that TensorFlow cannot
see (devices_check.py), 143 terminated by SIGTERM.
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from services import exit_codes
from services.wire.contract import WireError
from services.wire.replica import ReplicaLaunch, ReplicaSpec
from workers import layout
from workers.point_buffer import status_line
from workers.replica import distribution, evaluation_job, parent_watch, roles, termination
from workers.replica.callbacks import ReplicaReporter, announce, warn
from workers.replica.devices_check import require_given_gpus
from workers.replica.resources import ResourceSampler
from workers.replica.strategies import ConfigError, build_strategy
from workers.replica.trainers import (
    Evaluator,
    TrainerContext,
    UnknownTrainerError,
    load_evaluator,
    load_trainer,
    parse_trainer_name,
)
from workers.step_records import StepSampler

# Keras 3's model.fit breaks under MultiWorkerMirroredStrategy. Nothing above imports
# tensorflow (it is imported lazily), so this still comes first.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_NO_SPACE = exit_codes.NO_SPACE
# How much later than termination.GRACE the replica's watcher (parent_watch.py) kills it,
# for when the watchdog cannot run either (it needs the GIL, which TensorFlow may hold).
WATCHER_MARGIN = 3.0


def read_config(path: str | None) -> ReplicaLaunch:
    """Read and validate the spec file the agent wrote for this replica."""
    if not path:
        raise ConfigError("COHORT_REPLICA_SPEC is not set")
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise ConfigError(f"cannot read the spec file {path}: {exc}") from exc
    try:
        return ReplicaLaunch.decode(raw)
    except WireError as exc:
        raise ConfigError(str(exc)) from exc


def _config_error(error: Exception) -> int:
    status_line(f"cohort: bad replica configuration: {error}", sys.stderr)
    return EXIT_CONFIG


# Set when the replica's metrics file cannot be written for want of space. From then on
# its agent sees no progress, and the watchdog would declare it hung, hiding the cause:
# the replica stops at once instead (KeyboardInterrupt in the main thread, at its next
# Python bytecode) and exits NO_SPACE.
_no_space = threading.Event()
_running = threading.Event()  # the role's work runs: interrupting it is what stops it


def _stop_for_no_space() -> None:
    if not _no_space.is_set():
        _no_space.set()
        if _running.is_set():
            _thread.interrupt_main()


def replica_dirs(launch: ReplicaLaunch) -> dict[str, Path]:
    """The replica's directories, as the agent names them in the environment
    (workers/node/environment.py); a runner started by hand, without them, keeps
    everything under the job directory (workers/layout.py)."""
    job = layout.JobDirs(launch.job_dir)
    defaults = {
        "work_dir": ("COHORT_WORK_DIR", launch.job_dir),
        "checkpoint_dir": ("COHORT_CHECKPOINT_DIR", job.checkpoint_dir),
        "model_dir": ("COHORT_MODEL_DIR", job.model_dir),
        "tensorboard_dir": ("COHORT_TENSORBOARD_DIR", job.tensorboard_dir(launch.spec.index)),
        "input_dir": ("COHORT_INPUT_DIR", job.input_dir),
    }
    return {
        name: Path(os.environ.get(variable) or default)
        for name, (variable, default) in defaults.items()
    }


def run(launch: ReplicaLaunch, reporter: ReplicaReporter) -> int:
    """Serve, train or evaluate, by the replica's role, and report the final metrics."""
    spec = launch.spec
    if roles.is_server(spec):
        roles.start_server(spec)
        termination.handle_sigterm()  # the server, like the coordination service, installs its own
        roles.serve(reporter)  # until SIGTERM
        return EXIT_OK
    distribution.configure_devices(spec.distribution)  # before TensorFlow's runtime starts
    strategy = build_strategy(spec)
    distribution.apply_precision(spec.distribution)  # before the trainer builds its model
    # With a multi-worker TF_CONFIG, TensorFlow's coordination service installs its
    # own C-level SIGTERM handler (preemption notice) which neither exits nor calls
    # ours: without this the replica would ignore the agent's SIGTERM.
    termination.handle_sigterm()
    announce(
        f"strategy={spec.strategy} num_replicas_in_sync={strategy.num_replicas_in_sync} "
        f"role={spec.role}"
    )
    dirs = replica_dirs(launch)
    if spec.bundle is not None:
        # `module:function` resolves inside the job's own code first.
        sys.path.insert(0, str(layout.code_dir_in(dirs["work_dir"])))
    try:
        trainer = load_trainer(spec.trainer or "")
        evaluating = spec.role == "evaluator" or spec.evaluation is not None
        evaluate = load_evaluator(spec.trainer or "") if evaluating else None
    except UnknownTrainerError as exc:
        return _config_error(exc)

    for directory in (launch.job_dir, *dirs.values()):
        directory.mkdir(parents=True, exist_ok=True)
    ctx = TrainerContext(
        strategy=strategy,
        job_id=spec.job_id,
        attempt=spec.attempt,
        index=spec.index,
        replicas=spec.replicas,
        hyperparameters=dict(spec.hyperparameters),
        job_dir=launch.job_dir,
        reporter=reporter,
        distribution=spec.distribution,
        profile=spec.profile,
        role=spec.role,
        role_index=spec.role_index,
        **dirs,
    )
    if evaluating:
        return _evaluate(spec, evaluate, ctx, reporter)
    result = trainer(ctx)
    if result is not None and not isinstance(result, Mapping):
        raise TypeError(
            f"trainer {spec.trainer!r} returned {type(result).__name__}, expected a dict"
        )
    # Trained (and saved): final figures lost to a full disk must not undo the run.
    _running.clear()
    if not reporter.report_final(result or {}):
        warn(f"final metrics could not be written ({reporter.pending} points lost)")
    return EXIT_OK


def _evaluate(
    spec: ReplicaSpec, evaluate: Evaluator | None, ctx: TrainerContext, reporter: ReplicaReporter
) -> int:
    """A parameter_server evaluator: the trainer module's `evaluate(ctx)`, which
    reports as it goes (`ctx.evaluate_checkpoints`); without one there is nothing to do.
    Or an evaluation job's replica: a saved model on a holdout (evaluation_job.py)."""
    if spec.evaluation is not None:
        return evaluation_job.run(spec, evaluate, ctx, reporter)
    if evaluate is None:
        warn(
            f"trainer {spec.trainer!r} has no evaluate(ctx) next to it in its module; "
            "the evaluator has nothing to do"
        )
        return EXIT_OK
    result = evaluate(ctx)
    announce(f"evaluator finished: {dict(result or {})}")
    if not reporter.flush(wait=5.0):
        warn(f"evaluation metrics could not be written ({reporter.pending} points lost)")
    return EXIT_OK


def _read_launch() -> tuple[ReplicaLaunch, Path]:
    """The replica's launch (its spec and directories) and its metrics file, from the
    environment, checked before the (slow) TensorFlow start-up.

    Raises:
        ConfigError: no readable spec, no trainer named, or no COHORT_METRICS_FILE.
        UnknownTrainerError: a malformed trainer name.
    """
    launch = read_config(os.environ.get("COHORT_REPLICA_SPEC"))
    if launch.spec.trainer is None:
        raise ConfigError(
            "the spec names no trainer (a `command` job runs its own program, not this runner)"
        )
    parse_trainer_name(launch.spec.trainer)
    metrics_file = os.environ.get("COHORT_METRICS_FILE")
    if not metrics_file:
        raise ConfigError("COHORT_METRICS_FILE is not set")
    return launch, Path(metrics_file)


def main() -> int:
    """Run one replica from the environment; returns the process exit code."""
    try:
        return _replica()
    finally:
        termination.done()


def _replica() -> int:
    reporter_box: list[ReplicaReporter] = []
    # First: forked before this process starts any thread. Its SIGKILL is the backstop
    # of the watchdog below, which needs the GIL.
    parent_watch.start(term_grace=termination.GRACE + WATCHER_MARGIN)
    termination.install(reporter_box)
    try:
        launch, metrics_file = _read_launch()
    except (ConfigError, UnknownTrainerError) as exc:
        return _config_error(exc)
    spec = launch.spec

    announce(
        f"replica job={spec.job_id} attempt={spec.attempt} index={spec.index} "
        f"TF_CONFIG={os.environ.get('TF_CONFIG') or 'none'}"
    )
    reporter = ReplicaReporter(
        metrics_file,
        job_id=spec.job_id,
        attempt=spec.attempt,
        replica=spec.index,
        on_no_space=_stop_for_no_space,
        sampler=StepSampler(launch.step_points_per_second),
    )
    reporter_box.append(reporter)
    sampler = ResourceSampler(reporter)
    sampler.start()
    try:
        require_given_gpus()  # not a silent CPU run where GPUs were given
        _running.set()
        try:
            return run(launch, reporter)
        finally:
            _running.clear()
    except (ConfigError, roles.RoleError) as exc:  # found once TensorFlow is up
        return _config_error(exc)
    except SystemExit as exc:
        # SIGTERM (or a trainer calling sys.exit): keep what was measured.
        reporter.flush()
        return exc.code if isinstance(exc.code, int) else EXIT_FAILED
    except BaseException as exc:
        try:
            traceback.print_exc()
            sys.stderr.flush()
        except OSError:  # the log is on the full disk: the exit code still says why
            pass
        try:
            reporter.flush()
        except Exception:  # noqa: BLE001 - the trainer's error is the one that matters
            pass
        if termination.terminated.is_set():
            return termination.EXIT_TERMINATED
        return EXIT_NO_SPACE if _no_space.is_set() or exit_codes.is_no_space(exc) else EXIT_FAILED
    finally:
        sampler.stop()
        reporter.close()


def exit_with(code: int) -> NoReturn:
    """Exit with `code`, even when the log (on DATA_DIR) cannot take what is left in
    the output buffers: Python's own flush at exit would fail, and turn any code into 120."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        os._exit(code)
    sys.exit(code)


def _main() -> int:
    try:
        return main()
    except KeyboardInterrupt:  # the stop for want of space, come as `run` returned
        return EXIT_NO_SPACE if _no_space.is_set() else 128 + signal.SIGINT


if __name__ == "__main__":
    exit_with(_main())
