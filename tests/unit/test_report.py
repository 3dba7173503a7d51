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
