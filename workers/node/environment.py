"""The contract between the agent and a replica's process: its directories and variables.

Both ways of running a job get the same directories and variables (README, "What your
code gets"); a `trainer` additionally gets what Cohort's runner needs (its spec file,
the agent's pid). Neither gets a Redis URL, store or database credentials or anything
else of the agent's: a replica inherits only the variables named below, and reports
through its metrics file, which the agent ships (docs/security.md).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from services.cluster import tf_config
from services.wire.replica import ReplicaSpec, StartReplica
from workers import handoff, python_args
from workers.layout import JobDirs, ReplicaPaths
from workers.python_args import PythonProgram

# The only variables a replica inherits from the agent: finding programs and libraries,
# the locale and time zone, and the node's CUDA / NVIDIA / TensorFlow / NCCL / XLA
# settings (a GPU image sets LD_LIBRARY_PATH and NVIDIA_*; NCCL_SOCKET_IFNAME picks the
# network). Everything else the agent holds (COHORT_* settings and secrets, the store's
# AWS_* keys, a proxy's credentials, whatever its service manager gave it) stays with it:
# an allow-list, so a secret added to the agent's environment tomorrow is not leaked.
# TensorFlow's own TF_* settings by their families, never all of TF_*: Terraform's
# TF_TOKEN_* and TF_VAR_* hold credentials.
# A command's argv[0] that means the node's replica interpreter (the one with TensorFlow).
PYTHON_NAMES = ("python", "python3")
INHERITED_NAMES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH"})
INHERITED_PREFIXES = (
    "LC_",
    "CUDA_",
    "NVIDIA_",
    "NCCL_",
    "XLA_",
    "TF_CPP_",
    "TF_ENABLE_",
    "TF_FORCE_",
    "TF_GPU_",
    "TF_XLA_",
    "TF_NUM_",
    "TF_DETERMINISTIC_",
    "TF_CUDNN_",
    "TF_USE_",
)
_NEVER_INHERITED = frozenset({"TF_CONFIG"})  # the replica's own is the contract's


def inherited_env(agent_env: dict[str, str]) -> dict[str, str]:
    """The part of the agent's environment a replica inherits."""
    return {
        name: value
        for name, value in agent_env.items()
        if (name in INHERITED_NAMES or name.startswith(INHERITED_PREFIXES))
        and name not in _NEVER_INHERITED
    }


def agent_marks(node_id: str, data_dir: Path) -> dict[str, str]:
    """What marks a process as one this agent started for a replica: its node's id and
    the agent's DATA_DIR (isolation.reap reads both from /proc/<pid>/environ, the
    environment at exec, which a later change of os.environ does not alter). The node id
    alone is not enough: several agents on one host may carry the same one (test stacks,
    CI runs side by side), each with its own DATA_DIR, and job uids repeat between them."""
    return {"COHORT_NODE_ID": node_id, "COHORT_NODE_DATA_DIR": str(Path(data_dir).absolute())}


def contract_env(message: StartReplica, paths: ReplicaPaths) -> dict[str, str]:
    """The variables every replica process gets, whichever way it runs."""
    spec = message.spec
    env = {
        **agent_marks(message.node_id, paths.data_dir),
        "COHORT_JOB_ID": str(spec.job_id),
        "COHORT_ATTEMPT": str(spec.attempt),
        "COHORT_REPLICA_INDEX": str(spec.index),
        "COHORT_NUM_REPLICAS": str(spec.replicas),
        "COHORT_JOB_DIR": str(paths.job_dir),
        "COHORT_WORK_DIR": str(paths.work_dir),
        "COHORT_CHECKPOINT_DIR": str(paths.checkpoint_dir),
        "COHORT_MODEL_DIR": str(paths.model_dir),
        "COHORT_TENSORBOARD_DIR": str(paths.tensorboard_dir),
        "COHORT_INPUT_DIR": str(paths.input_dir),
        "COHORT_METRICS_FILE": str(paths.metrics_file),
        "COHORT_HYPERPARAMETERS": str(paths.hyperparameters_file),
        # Vertex AI's names for the same directories, which many scripts already read.
        "AIP_MODEL_DIR": str(paths.model_dir),
        "AIP_CHECKPOINT_DIR": str(paths.checkpoint_dir),
        "AIP_TENSORBOARD_LOG_DIR": str(paths.tensorboard_dir),
    }
    if spec.evaluation is not None:
        # An evaluation job reads the model it evaluates (fetched read-only) and the holdout.
        evaluated = JobDirs(paths.job_dir)
        env["COHORT_MODEL_DIR"] = env["AIP_MODEL_DIR"] = str(evaluated.evaluated_model_dir)
        env["COHORT_HOLDOUT_DIR"] = str(evaluated.holdout_dir)
    # A scheduled run's fire time and data (services/retraining/fire_env.py): set here,
    # after the job's own `env`, so a job cannot pose as another fire's run.
    env.update(spec.schedule_env)
    if message.tf_config:
        env["TF_CONFIG"] = tf_config.dumps(message.tf_config)
    return env


def _node_env(home: Path, tmp: Path, inherit: bool = True) -> dict[str, str]:
    """What every process the agent starts for replicas gets before the job's own part
    (`inherit`: the node's variables too; a container has its image's PATH and libraries)."""
    env: dict[str, str] = {}
    if inherit:
        env = inherited_env(dict(os.environ))
        env.setdefault("PATH", os.defpath)
    env["HOME"] = str(home)
    env["TMPDIR"] = str(tmp)
    # Keras 3's fit() breaks under MultiWorkerMirroredStrategy; tf-keras works. A job
    # may set it to 0 in its `env` for a Keras 3 script.
    env["TF_USE_LEGACY_KERAS"] = "1"
    return env


# A gang's replicas start within a second of each other, in no set order. One that dials
# a peer not listening yet waits gRPC's first reconnect backoff, 1 s, before it dials
# again: the gang's first step came ~0.8 s later whenever worker 1 was up 0.3 s before
# worker 0 (docs/benchmarks.md). Its later backoffs still grow by 1.6 to TensorFlow's 1 s
# cap, so a peer that is gone costs no more dialling than before.
GANG_GRPC_OPTIONS = "grpc.initial_reconnect_backoff_ms=50"


def replica_env(
    message: StartReplica, paths: ReplicaPaths, container: bool = False
) -> dict[str, str]:
    """The whole environment of a replica process: what it inherits from the node, the
    job's own `env`, then Cohort's contract (which the job's names can never shadow).
    In a `container` (workers/node/containers.py) nothing of the node's: the image has
    its own PATH and libraries, and the engine gives it only the GPUs it was given."""
    # Its own directory as HOME (caches such as ~/.keras land there, not in the agent's
    # home) and the job's scratch as TMPDIR (never a /tmp other jobs share).
    env = _node_env(paths.work_dir, paths.tmp_dir, inherit=not container)
    if message.tf_config:
        env["TF_GRPC_DEFAULT_OPTIONS"] = GANG_GRPC_OPTIONS  # the job's own `env` may replace it
    env.update(message.spec.env)
    env.update(contract_env(message, paths))
    env["PYTHONUNBUFFERED"] = "1"
    # The ids are NVML's, which number GPUs in PCI bus order; CUDA numbers them fastest
    # first unless told otherwise, and would hand the replica another card.
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if container:
        # The engine hands the container only its GPUs, which CUDA numbers from 0 there;
        # none at all (an image's NVIDIA_VISIBLE_DEVICES=all) for a CPU replica.
        # A job's own NVIDIA_VISIBLE_DEVICES would reach past them: the given ids win.
        given = [g for g in message.gpu_ids.split(",") if g]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(given)))
        env["NVIDIA_VISIBLE_DEVICES"] = message.gpu_ids or "void"
    else:
        env["CUDA_VISIBLE_DEVICES"] = message.gpu_ids
    if message.spec.command is None:
        # The runner (Cohort's own code) reports in the metrics file, like any command,
        # and stops itself when the agent dies (workers/replica/parent_watch.py); in a
        # container the agent's pid means nothing, and its guard stops the container.
        env["COHORT_REPLICA_SPEC"] = str(paths.spec_file)
        if not container:
            env["COHORT_AGENT_PID"] = str(os.getpid())
    return env


def warm_env(
    node_id: str, data_dir: Path, home: Path, tmp: Path, preload: Sequence[str] = ()
) -> dict[str, str]:
    """The environment a warm replica process (workers/node/pool.py) is exec'd with,
    before any job is known: the node's part of every replica's, in an agent-only
    directory, what makes it this agent's replica from the first instruction on —
    `agent_marks` and COHORT_AGENT_PID — and the modules it imports ahead
    (handoff.PRELOAD_VARIABLE; the hand-off replaces the whole environment: no job sees
    it)."""
    env = _node_env(home, tmp)
    env.update(agent_marks(node_id, data_dir))
    env["COHORT_AGENT_PID"] = str(os.getpid())
    env["PYTHONUNBUFFERED"] = "1"
    env[handoff.PRELOAD_VARIABLE] = ",".join(preload)
    return env


# Variable families a process may read while Python starts or TensorFlow is imported
# (TF_CPP_MIN_LOG_LEVEL, TF_ENABLE_ONEDNN_OPTS, TF_USE_LEGACY_KERAS, KERAS_HOME, OMP_*,
# MALLOC_*...): a warm process has read the node's values already when it is handed a
# job. Conservative: the CUDA, NCCL and XLA ones are read later, at device or compiler
# start, but nothing here rests on that.
_READ_AT_IMPORT = (
    "TF_",
    "KERAS",
    "XLA_",
    "CUDA_",
    "NVIDIA_",
    "NCCL_",
    "OMP_",
    "KMP_",
    "MKL",
    "OPENBLAS_",
    # NumPy (imported with TensorFlow) and the default preload's scikit-learn, SciPy and
    # joblib (COHORT_REPLICA_POOL_PRELOAD) read theirs at import too.
    "NPY_",
    "NUMPY_",
    "SKLEARN_",
    "SCIPY_",
    "JOBLIB_",
    "MALLOC_",
    "GLIBC_",
    "LD_",
    "PYTHON",
)


def warm_program(spec: ReplicaSpec) -> PythonProgram | None:
    """The program of a `command` job that is the node's `python` running a script or a
    module (workers/python_args.py); None for anything else."""
    command = spec.command
    if not command or command[0] not in PYTHON_NAMES:
        return None
    return python_args.parse(command[1:])


def warm_servable(spec: ReplicaSpec) -> bool:
    """Whether a warm process may run this replica: Cohort's runner (a `trainer`) or a
    `command` that is `python` running a script or module (`warm_program`), with no
    variable of its job's `env` that would have had to be set before TensorFlow was
    imported (such a job gets a cold process, where it is), and no requirements: the
    pool's processes run on the node's interpreter, and a job with requirements runs on
    its environment's (workers/node/envs.py). It starts cold; a pool per environment
    would hold ~250 MiB per process for environments few jobs share."""
    return (
        (spec.command is None or warm_program(spec) is not None)
        and not spec.requirements
        and spec.image is None  # a container of its own image, started cold
        and not any(name.startswith(_READ_AT_IMPORT) for name in spec.env)
    )


class CommandNotFound(FileNotFoundError):
    """argv[0] of a job's command is not on this node."""


def resolve_argv(command: list[str], python: str, env: dict[str, str], cwd: Path) -> list[str]:
    """The argv to exec: `python` is the node's replica interpreter (it has TensorFlow);
    a name with a '/' is a path (relative to the code directory); other names are looked
    up on the replica's PATH.

    Raises:
        CommandNotFound: argv[0] names nothing executable.
    """
    program = command[0]
    if program in PYTHON_NAMES:
        return [python or sys.executable, *command[1:]]
    if "/" in program:
        path = Path(program) if Path(program).is_absolute() else cwd / program
        if not path.is_file():
            raise CommandNotFound(f"command not found: {program}")
        return [str(path), *command[1:]]
    found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        raise CommandNotFound(f"command not found: {program}")
    return [found, *command[1:]]
