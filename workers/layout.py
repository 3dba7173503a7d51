"""Where a job's files go on a node: the one module that names these directories.

    DATA_DIR/jobs/<job_id>/                        job_dir: shared by the job's replicas here
        checkpoints/                               COHORT_CHECKPOINT_DIR (BackupAndRestore)
        model/                                     COHORT_MODEL_DIR
        tensorboard/replica-<i>/                   COHORT_TENSORBOARD_DIR
        inputs/                                    COHORT_INPUT_DIR (the job's data files)
            model/ holdout/                        an evaluation job's: COHORT_MODEL_DIR
                                                   and COHORT_HOLDOUT_DIR, read-only
        tmp/                                       TMPDIR: scratch shared by the job's replicas
        logs/attempt-<n>/replica-<i>.log           the replica's stdout and stderr
        attempt-<n>/replica-<i>/                   work_dir (0700): one replica of one attempt
            spec.json                              COHORT_REPLICA_SPEC
            hyperparameters.json                   COHORT_HYPERPARAMETERS
            metrics.jsonl                          COHORT_METRICS_FILE (cohort.report())
            code/                                  the unpacked bundle: cwd, first on sys.path
    DATA_DIR/cache/bundles/                        fetched bundles, bounded, least recently used
    DATA_DIR/pool/                                 the agent's warm replica processes (0700):
        home/ tmp/ warm.log                        HOME, TMPDIR, output until a hand-off

Both the agent (workers/node/) and the replica's runner (workers/replica/runner.py,
which falls back on it when started by hand, without the agent's variables) ask this
module, so it sits above both rooms, which never import each other. Standard library
only, and pure: nothing here creates a directory (workers/node/isolation.py creates
them, with their owners and modes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class JobDirs:
    """The directories inside one job's directory, wherever that is."""

    root: Path

    @property
    def checkpoint_dir(self) -> Path:
        """The job's checkpoints (COHORT_CHECKPOINT_DIR, AIP_CHECKPOINT_DIR)."""
        return self.root / "checkpoints"

    @property
    def model_dir(self) -> Path:
        """Where the trained model is saved (COHORT_MODEL_DIR, AIP_MODEL_DIR)."""
        return self.root / "model"

    @property
    def input_dir(self) -> Path:
        """The job's input files fetched from the store (COHORT_INPUT_DIR)."""
        return self.root / "inputs"

    @property
    def evaluated_model_dir(self) -> Path:
        """An evaluation job's model, fetched read-only (its COHORT_MODEL_DIR)."""
        return self.input_dir / "model"

    @property
    def holdout_dir(self) -> Path:
        """An evaluation job's holdout, fetched read-only (COHORT_HOLDOUT_DIR)."""
        return self.input_dir / "holdout"

    @property
    def tmp_dir(self) -> Path:
        """Scratch shared by the job's replicas here (their TMPDIR); removed at cleanup."""
        return self.root / "tmp"

    @property
    def legacy_backup_dir(self) -> Path:
        """Where jobs placed before the checkpoint directory kept their checkpoints."""
        return self.root / "backup"

    def tensorboard_dir(self, index: int) -> Path:
        """Replica `index`'s TensorBoard event files (COHORT_TENSORBOARD_DIR,
        AIP_TENSORBOARD_LOG_DIR); the same directory across attempts, like the store's."""
        return self.root / "tensorboard" / f"replica-{int(index)}"

    def work_dir(self, attempt: int, index: int) -> Path:
        """Replica `index` of attempt `attempt`: its own directory (spec, metrics, code)."""
        return self.root / f"attempt-{int(attempt)}" / f"replica-{int(index)}"

    def log_dir(self, attempt: int) -> Path:
        """The logs of attempt `attempt`'s replicas (the agent's alone)."""
        return self.root / "logs" / f"attempt-{int(attempt)}"

    def log_file(self, attempt: int, index: int) -> Path:
        """Where the replica's stdout and stderr go."""
        return self.log_dir(attempt) / f"replica-{int(index)}.log"

    def scratch(self) -> tuple[Path, ...]:
        """What a finished job's cleanup removes; its logs and saved model stay."""
        return (self.checkpoint_dir, self.legacy_backup_dir, self.tmp_dir)


def code_dir_in(work_dir: Path) -> Path:
    """Where the replica's copy of the job's bundle is unpacked (its cwd)."""
    return work_dir / "code"


def jobs_dir(data_dir: Path) -> Path:
    """The directory holding every job's directory on this node."""
    return Path(data_dir) / "jobs"


def job_dir(data_dir: Path, job_id: int) -> Path:
    """A job's directory on this node, shared by its replicas here."""
    return jobs_dir(data_dir) / str(int(job_id))


def job_dirs(data_dir: Path, job_id: int) -> JobDirs:
    """The directories of job `job_id` on this node."""
    return JobDirs(job_dir(data_dir, job_id))


def work_dir(data_dir: Path, job_id: int, attempt: int, index: int) -> Path:
    """Replica `index` of attempt `attempt`: its own directory (spec, metrics file, code)."""
    return job_dirs(data_dir, job_id).work_dir(attempt, index)


def code_dir(data_dir: Path, job_id: int, attempt: int, index: int) -> Path:
    """Where the replica's copy of the job's bundle is unpacked (its cwd)."""
    return code_dir_in(work_dir(data_dir, job_id, attempt, index))


def spec_file(data_dir: Path, job_id: int, attempt: int, index: int) -> Path:
    """The replica's spec, written by the agent (COHORT_REPLICA_SPEC)."""
    return work_dir(data_dir, job_id, attempt, index) / "spec.json"


def hyperparameters_file(data_dir: Path, job_id: int, attempt: int, index: int) -> Path:
    """The job's hyperparameters as JSON (COHORT_HYPERPARAMETERS)."""
    return work_dir(data_dir, job_id, attempt, index) / "hyperparameters.json"


def metrics_file(data_dir: Path, job_id: int, attempt: int, index: int) -> Path:
    """JSON lines that `cohort.report()` appends (COHORT_METRICS_FILE), per attempt."""
    return work_dir(data_dir, job_id, attempt, index) / "metrics.jsonl"


def log_file(data_dir: Path, job_id: int, attempt: int, index: int) -> Path:
    """Where the replica's stdout and stderr go."""
    return job_dirs(data_dir, job_id).log_file(attempt, index)


def checkpoint_dir(data_dir: Path, job_id: int) -> Path:
    """The job's checkpoints on this node (COHORT_CHECKPOINT_DIR, AIP_CHECKPOINT_DIR)."""
    return job_dirs(data_dir, job_id).checkpoint_dir


def model_dir(data_dir: Path, job_id: int) -> Path:
    """Where the trained model is saved (COHORT_MODEL_DIR, AIP_MODEL_DIR)."""
    return job_dirs(data_dir, job_id).model_dir


def tensorboard_dir(data_dir: Path, job_id: int, index: int) -> Path:
    """Replica `index`'s TensorBoard event files (COHORT_TENSORBOARD_DIR)."""
    return job_dirs(data_dir, job_id).tensorboard_dir(index)


def input_dir(data_dir: Path, job_id: int) -> Path:
    """The job's input files fetched from the store (COHORT_INPUT_DIR)."""
    return job_dirs(data_dir, job_id).input_dir


def tmp_dir(data_dir: Path, job_id: int) -> Path:
    """Scratch shared by the job's replicas here (their TMPDIR); removed at cleanup."""
    return job_dirs(data_dir, job_id).tmp_dir


@dataclass(frozen=True)
class ReplicaPaths:
    """Where one replica's files are on this node."""

    data_dir: Path  # the agent's DATA_DIR, absolute
    job_dir: Path
    work_dir: Path
    code_dir: Path
    checkpoint_dir: Path
    model_dir: Path
    tensorboard_dir: Path
    input_dir: Path
    tmp_dir: Path
    log_dir: Path
    log_file: Path
    metrics_file: Path
    hyperparameters_file: Path
    spec_file: Path

    @classmethod
    def of(cls, data_dir: Path, job_id: int, attempt: int, index: int) -> ReplicaPaths:
        """Replica `index` of attempt `attempt` of job `job_id` under `data_dir`."""
        data_dir = Path(data_dir).absolute()
        job = job_dirs(data_dir, job_id)
        work = job.work_dir(attempt, index)
        return cls(
            data_dir=data_dir,
            job_dir=job.root,
            work_dir=work,
            code_dir=code_dir_in(work),
            checkpoint_dir=job.checkpoint_dir,
            model_dir=job.model_dir,
            tensorboard_dir=job.tensorboard_dir(index),
            input_dir=job.input_dir,
            tmp_dir=job.tmp_dir,
            log_dir=job.log_dir(attempt),
            log_file=job.log_file(attempt, index),
            metrics_file=metrics_file(data_dir, job_id, attempt, index),
            hyperparameters_file=hyperparameters_file(data_dir, job_id, attempt, index),
            spec_file=spec_file(data_dir, job_id, attempt, index),
        )


def bundle_cache_dir(data_dir: Path) -> Path:
    """This node's cache of fetched bundles."""
    return Path(data_dir) / "cache" / "bundles"


@dataclass(frozen=True)
class PoolDirs:
    """The agent's own directory for its warm replica processes (workers/node/pool.py)."""

    root: Path

    @property
    def home(self) -> Path:
        """HOME of a warm process until a hand-off."""
        return self.root / "home"

    @property
    def tmp(self) -> Path:
        """TMPDIR of a warm process until a hand-off."""
        return self.root / "tmp"

    @property
    def log_file(self) -> Path:
        """Where warm processes write until a hand-off gives them a replica's log."""
        return self.root / "warm.log"


def pool_dirs(data_dir: Path) -> PoolDirs:
    """The warm replica processes' directories on this node."""
    return PoolDirs(Path(data_dir) / "pool")
