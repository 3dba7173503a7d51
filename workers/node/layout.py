"""Where a job's files go on a node: the one place that names these directories.

    DATA_DIR/jobs/<job_id>/                        job_dir: shared by the job's replicas here
        checkpoints/                               COHORT_CHECKPOINT_DIR (BackupAndRestore)
        model/                                     COHORT_MODEL_DIR
        tensorboard/replica-<i>/                   COHORT_TENSORBOARD_DIR
        inputs/                                    COHORT_INPUT_DIR (the job's data files)
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

Standard library only, and pure: nothing here creates a directory (workers/node/
isolation.py creates them, with their owners and modes). Node code and the
tests import it, so a path is spelled once; the replica process gets these paths from
its spec file and environment (replica code never imports workers/node).
"""

from __future__ import annotations

from pathlib import Path


def job_dir(data_dir: Path, job_id: int) -> Path:
    """A job's directory on this node, shared by its replicas here."""
    return Path(data_dir) / "jobs" / str(int(job_id))


def work_dir(data_dir: Path, job_id: int, attempt: int, index: int) -> Path:
    """Replica `index` of attempt `attempt`: its own directory (spec, metrics file, code)."""
    return job_dir(data_dir, job_id) / f"attempt-{int(attempt)}" / f"replica-{int(index)}"


def code_dir(data_dir: Path, job_id: int, attempt: int, index: int) -> Path:
    """Where the replica's copy of the job's bundle is unpacked (its cwd)."""
    return work_dir(data_dir, job_id, attempt, index) / "code"


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
    return (
        job_dir(data_dir, job_id) / "logs" / f"attempt-{int(attempt)}" / f"replica-{int(index)}.log"
    )


def checkpoint_dir(data_dir: Path, job_id: int) -> Path:
    """The job's checkpoints on this node (COHORT_CHECKPOINT_DIR, AIP_CHECKPOINT_DIR)."""
    return job_dir(data_dir, job_id) / "checkpoints"


def model_dir(data_dir: Path, job_id: int) -> Path:
    """Where the trained model is saved (COHORT_MODEL_DIR, AIP_MODEL_DIR)."""
    return job_dir(data_dir, job_id) / "model"


def tensorboard_dir(data_dir: Path, job_id: int, index: int) -> Path:
    """Replica `index`'s TensorBoard event files (COHORT_TENSORBOARD_DIR,
    AIP_TENSORBOARD_LOG_DIR); the same directory across attempts, like the store's."""
    return job_dir(data_dir, job_id) / "tensorboard" / f"replica-{int(index)}"


def input_dir(data_dir: Path, job_id: int) -> Path:
    """The job's input files fetched from the store (COHORT_INPUT_DIR)."""
    return job_dir(data_dir, job_id) / "inputs"


def tmp_dir(data_dir: Path, job_id: int) -> Path:
    """Scratch shared by the job's replicas here (their TMPDIR); removed at cleanup."""
    return job_dir(data_dir, job_id) / "tmp"


def bundle_cache_dir(data_dir: Path) -> Path:
    """This node's cache of fetched bundles."""
    return Path(data_dir) / "cache" / "bundles"


def pool_dir(data_dir: Path) -> Path:
    """The agent's own directory for its warm replica processes (workers/node/pool.py)."""
    return Path(data_dir) / "pool"
