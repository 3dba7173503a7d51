"""The control plane runs without the worker extra: every module of the api, the services,
the scheduler (workers.control) and the CLI imports with TensorFlow and the other
agent-only packages absent, as in the control-plane image."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The `node` extra's packages and TensorFlow, by import name (pyproject.toml). numpy is
# not one: the scheduler's sweeps run on Optuna, which needs it.
WORKER_ONLY = [
    "tensorflow",
    "tf_keras",
    "keras",
    "tensorboard",
    "sklearn",
    "crc32c",
    "pynvml",
]

CONTROL_PLANE = ["api", "services", "workers.control", "workers.celery_app", "cli"]

# Walks the packages in a fresh interpreter whose import system refuses WORKER_ONLY; prints
# each module that failed to import, with why.
PROBE = textwrap.dedent("""
    import importlib, importlib.abc, pkgutil, sys

    BLOCKED = set(sys.argv[1].split(","))

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
            return None

    sys.meta_path.insert(0, Absent())
    failed = []
    def load(name):
        try:
            return importlib.import_module(name)
        except Exception as exc:
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
            return None

    for root in sys.argv[2].split(","):
        package = load(root)
        if hasattr(package, "__path__"):
            for info in pkgutil.walk_packages(package.__path__, prefix=root + "."):
                if not info.name.endswith(".__main__"):  # runs the command line
                    load(info.name)
    leaked = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
    print("\\n".join(failed + [f"imported: {m}" for m in leaked]))
""")


def probe(blocked: list[str], packages: list[str]) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(blocked), ",".join(packages)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if line]


def test_control_plane_imports_without_the_worker_extra() -> None:
    assert probe(WORKER_ONLY, CONTROL_PLANE) == []


@pytest.mark.parametrize("module", ["workers.replica.trainers.mlp_digits", "workers.node.tfevents"])
def test_the_probe_sees_a_module_that_needs_the_worker_extra(module: str) -> None:
    # The same probe on a module that needs TensorFlow or tensorboard at import does fail:
    # the check above can fail.
    failures = probe(WORKER_ONLY, [module])
    assert failures and "blocked" in failures[0], failures
