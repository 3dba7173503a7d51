"""What a process loads at its start, that only some of its work needs: the agent leaves
tensorboard's protos (and numpy, boto3 with them) to the first TensorBoard event file it
follows (workers/node/replica_files.py), the scheduler leaves Optuna (and numpy) to the first
pass with a sweep to act on (services/sweeps/advance.py). Each is a fresh interpreter
importing the process's module, as `cohort agent` and `cohort scheduler` do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOADED = "import sys, importlib; importlib.import_module(sys.argv[1]); " + (
    "print(' '.join(sorted({m.partition('.')[0] for m in sys.modules})))"
)


def loaded_by(module: str) -> set[str]:
    """The top-level packages a fresh interpreter has loaded once `module` is imported."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED, module],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(done.stdout.split())


@pytest.mark.parametrize(
    ("module", "left_for_later"),
    [
        ("workers.node.agent_process", {"tensorboard", "numpy", "boto3", "tensorflow"}),
        ("workers.control.scheduler", {"optuna", "numpy", "tensorflow"}),
    ],
)
def test_a_process_starts_without_what_only_some_work_needs(
    module: str, left_for_later: set[str]
) -> None:
    loaded = loaded_by(module)
    assert "workers" in loaded  # the probe saw the import
    assert not loaded & left_for_later, sorted(loaded & left_for_later)


def test_the_probe_sees_them_once_the_work_comes() -> None:
    # The same probe on the modules that do the work: the check above can fail.
    assert {"tensorboard", "numpy"} <= loaded_by("workers.node.tfevents")
    assert {"optuna", "numpy"} <= loaded_by("services.sweeps.trials")
