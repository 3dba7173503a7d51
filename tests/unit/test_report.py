"""`from cohort import report` as a training script uses it: real processes, real files."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cohort import report


def run_script(code: str, metrics_file: Path | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COHORT_METRICS_FILE"}
    if metrics_file is not None:
        env["COHORT_METRICS_FILE"] = str(metrics_file)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_script_appends_one_json_line_per_report(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    done = run_script(
        "import numpy as np\n"
        "from cohort import report\n"
        "report(1, loss=0.5, accuracy=1)\n"
        "report(2, loss=np.float32(0.25), lr=np.array(0.125))\n",
        path,
    )
    assert done.returncode == 0, done.stderr
    first, second = lines_of(path)
    assert first["step"] == 1 and first["metrics"] == {"loss": 0.5, "accuracy": 1.0}
    assert second["step"] == 2 and second["metrics"] == {"loss": 0.25, "lr": 0.125}
    assert 0 < first["ts"] <= second["ts"]


def test_outside_cohort_report_warns_once_and_writes_nothing(tmp_path: Path) -> None:
    done = run_script(
        "import warnings; warnings.simplefilter('always')\n"
        "from cohort import report\n"
        "for step in range(3): report(step, loss=1.0)\n",
        None,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("COHORT_METRICS_FILE is not set") == 1
    assert list(tmp_path.iterdir()) == []


def test_many_processes_reporting_at_once_never_tear_a_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    code = (
        "import os\nfrom cohort import report\n"
        "for step in range(500): report(step, **{f'm{i}': os.getpid() for i in range(20)})\n"
    )
    env = {**os.environ, "COHORT_METRICS_FILE": str(path)}
    writers = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(4)]
    assert [w.wait(60) for w in writers] == [0, 0, 0, 0]
    lines = lines_of(path)  # each line parses: none interleaved with another
    assert len(lines) == 2000
    assert {len(set(line["metrics"].values())) for line in lines} == {1}


@pytest.mark.parametrize(
    ("step", "metrics", "error", "says"),
    [
        (1, {"loss": math.nan}, ValueError, "'loss' is nan"),
        (1, {"loss": math.inf}, ValueError, "only finite values"),
        (1, {"loss": "0.5"}, TypeError, "'loss' must be a number, not str"),
        (1, {"loss": None}, TypeError, "not NoneType"),
        (1, {"loss": [1.0]}, TypeError, "not list"),
        (1, {"loss": True}, TypeError, "not bool"),
        (1, {"loss": np.array([1.0, 2.0])}, TypeError, "single number"),
        (1.0, {"loss": 1.0}, TypeError, "step must be an integer"),
        (True, {"loss": 1.0}, TypeError, "step must be an integer"),
        (-1, {"loss": 1.0}, ValueError, "step must be between 0"),
        (2**31, {"loss": 1.0}, ValueError, "step must be between 0"),
        (1, {}, ValueError, "at least one metric"),
        (1, {"x" * 65: 1.0}, ValueError, "longer than 64"),
    ],
)
def test_bad_values_are_refused_naming_the_problem(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    step: Any,
    metrics: dict[str, Any],
    error: type[Exception],
    says: str,
) -> None:
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("COHORT_METRICS_FILE", str(path))
    with pytest.raises(error, match=says.replace("[", r"\[")):
        report(step, **metrics)
    assert not path.exists() or path.read_text() == ""


def test_points_reach_the_file_while_the_script_runs_without_a_flush(tmp_path: Path) -> None:
    # The writer thread writes within FLUSH_SECONDS: the agent sees progress as the
    # script goes, not only at its exit.
    path = tmp_path / "metrics.jsonl"
    code = (
        "import os, sys, time\nfrom cohort import report\n"
        "report(1, loss=0.5)\n"
        "path, deadline = sys.argv[1], time.monotonic() + 10\n"
        "def written(): return os.path.exists(path) and os.path.getsize(path) > 0\n"
        "while time.monotonic() < deadline and not written(): time.sleep(0.01)\n"
        "print('seen' if written() else 'not', flush=True)\n"
        "os._exit(0)\n"  # no atexit: only the thread can have written it
    )
    env = {**os.environ, "COHORT_METRICS_FILE": str(path)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "seen", done.stderr
    assert [line["step"] for line in lines_of(path)] == [1]


def test_a_tensor_that_is_not_finite_when_read_is_dropped_and_said_once(tmp_path: Path) -> None:
    # A tensor is read on the writer's thread, after report() returned: its problem
    # cannot be raised to the caller, so the point is dropped and the script is told
    # on stderr, once per metric. Its line's other metrics are kept.
    path = tmp_path / "metrics.jsonl"
    done = run_script(
        "from cohort import report\n"
        "class Tensor:\n"
        "    def __init__(self, value): self.value = value\n"
        "    def __float__(self): return float(self.value)\n"
        "report(1, loss=Tensor(0.5), accuracy=Tensor(float('nan')))\n"
        "report(2, loss=Tensor(float('inf')), accuracy=Tensor(float('nan')))\n"
        "report(3, loss=Tensor(0.25), lr=Tensor([1.0, 2.0]))\n",
        path,
    )
    assert done.returncode == 0, done.stderr
    lines = lines_of(path)
    assert [(line["step"], line["metrics"]) for line in lines] == [
        (1, {"loss": 0.5}),
        (3, {"loss": 0.25}),
    ]
    assert done.stderr.count("'accuracy' at step 1 is nan") == 1
    assert done.stderr.count("'accuracy'") == 1  # once per metric
    assert "'loss' at step 2 is inf" in done.stderr
    assert "'lr' at step 3 is not a single number" in done.stderr


def test_forked_children_write_their_own_points_and_never_their_parents(
    tmp_path: Path,
) -> None:
    # A multiprocessing child (fork) ends with os._exit, skipping atexit: its points
    # are written by multiprocessing's finalizers. What the parent had queued at the
    # fork is the parent's to write, once.
    path = tmp_path / "metrics.jsonl"
    done = run_script(
        "import multiprocessing as mp\n"
        "from cohort import report\n"
        "def child(n):\n"
        "    for step in range(100): report(step, child=float(n))\n"
        "for step in range(100): report(step, parent=1.0)\n"
        "ctx = mp.get_context('fork')\n"
        "procs = [ctx.Process(target=child, args=(n,)) for n in range(3)]\n"
        "[p.start() for p in procs]\n"
        "[p.join() for p in procs]\n"
        "assert [p.exitcode for p in procs] == [0, 0, 0]\n",
        path,
    )
    assert done.returncode == 0, done.stderr
    seen: dict[str, list[int]] = {}
    for line in lines_of(path):
        ((name, value),) = line["metrics"].items()
        seen.setdefault(f"{name}{value:g}" if name == "child" else name, []).append(line["step"])
    assert {key: sorted(steps) for key, steps in seen.items()} == {
        key: list(range(100)) for key in ("parent", "child0", "child1", "child2")
    }
