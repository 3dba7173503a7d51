"""The OpenAPI document against the real api (uvicorn, PostgreSQL, Redis): schemathesis with
every check on, a bounded number of examples per operation, as an admin. Zero failures.

schemathesis runs as its CLI, as a person would run it; tests/e2e/schemathesis.toml says
which answers its positive-data check takes for the few operations whose rules JSON Schema
cannot carry, and leaves out the two SSE streams (they never end; why: there).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import pg_stack_with

pytestmark = pytest.mark.slow(80)

CONFIG = Path(__file__).with_name("schemathesis.toml")
TOKEN = "schemathesis-admin-token-" + "0" * 24  # the bootstrap token: an admin's
# Examples per operation: about 5,000 requests in all (the coverage phase adds its own),
# 1-3 minutes on two busy cores.
MAX_EXAMPLES = 10


def test_schemathesis_finds_no_failure_in_any_operation(
    tmp_path: Path, record_property: Any
) -> None:
    # /metrics on, as a deployment with Prometheus has it (its own bearer: schemathesis'
    # admin token gets 401 there, the answer the document gives).
    env = {"COHORT_BOOTSTRAP_TOKEN": TOKEN, "COHORT_METRICS_TOKEN": "metrics-" + "0" * 32}
    with pg_stack_with(tmp_path, env, parts=("api",)) as (stack, _):
        st = Path(sys.executable).with_name("st")
        result = subprocess.run(
            [
                str(st),
                "--no-color",
                "--config-file",
                str(CONFIG),
                "run",
                f"{stack.url}/openapi.json",
                "--header",
                f"Authorization: Bearer {TOKEN}",
                "--checks",
                "all",
                "--max-examples",
                str(MAX_EXAMPLES),
                "--workers",
                "1",
                "--output-truncate",
                "true",
            ],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp_path,
        )
    out = result.stdout + result.stderr
    tested = re.search(r"Tested: (\d+)", out)
    generated = re.search(r"(\d+) generated", out)
    assert tested and generated, out[-4000:]
    record_property("operations", int(tested.group(1)))
    record_property("test_cases", int(generated.group(1)))
    assert result.returncode == 0, out[-12000:]
    assert (
        re.search(r"\b0 failures\b|No issues found", out)
        or "failure" not in out.split("SUMMARY")[-1]
    ), out[-12000:]
    # Every operation of the document but the two streams ran.
    assert int(tested.group(1)) >= 31, out[-4000:]
