"""The lists the images install their dependencies from (deploy/requirements.py reading
pyproject.toml): the control plane gets no TensorFlow, a worker the CPU build, a GPU worker
the CUDA build, each with the pins of pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def requirements(*extras: str) -> list[str]:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "deploy" / "requirements.py"),
            str(ROOT / "pyproject.toml"),
            *extras,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def names(lines: list[str]) -> set[str]:
    return {line.split("==")[0].split("[")[0].lower() for line in lines}


def test_every_requirement_is_pinned_exactly() -> None:
    lines = requirements("worker", "gpu", "dev")
    assert lines and all("==" in line for line in lines), lines
    assert not [line for line in lines if line.startswith("cohort")]


def test_control_plane_has_no_tensorflow() -> None:
    assert not names(requirements()) & {
        "tensorflow",
        "tensorflow-cpu",
        "tf-keras",
        "tensorboard",
        "scikit-learn",
    }
    # The scheduler's sweeps: Optuna and CMA-ES, with numpy at the agents' version.
    assert {"optuna==5.0.0", "cmaes==0.13.1", "numpy==2.4.6"} <= set(requirements())


def test_worker_is_cpu_and_gpu_is_cuda() -> None:
    worker, gpu = requirements("worker"), requirements("gpu")
    assert "tensorflow-cpu==2.21.0" in worker and not [x for x in worker if "and-cuda" in x]
    assert "tensorflow[and-cuda]==2.21.0" in gpu and "tensorflow-cpu==2.21.0" not in gpu
    assert {"tf-keras", "tensorboard"} <= names(worker) & names(gpu)
    assert set(requirements()) <= set(worker)


def test_an_unknown_extra_is_refused() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "deploy" / "requirements.py"),
            str(ROOT / "pyproject.toml"),
            "wrokers",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode != 0 and "no extra 'wrokers'" in result.stderr
