"""The chaos soak at the CI size (tests/chaos/soak.py; `make chaos` runs the large one):
a dozen small jobs on three agents under every kind of fault, and no invariant broken.

Most of its jobs are steppers (tests/e2e/stepper.py) and a quarter TensorFlow: the faults
and the invariants are the control plane's, and a TensorFlow replica's CPU (about 7 s
each) made this one test a tenth of the real-process suite's time. The faults come two to
five seconds apart, the first round one of each kind (the replica faults while jobs run,
the rest even after they ended), and stop after CI_MAX_FAULTS."""

from __future__ import annotations

import os
import sys

import pytest

from tests.capabilities import need_postgres_server
from tests.chaos.faults import FAULT_KINDS
from tests.chaos.soak import SoakConfig, run_soak

pytestmark = [pytest.mark.e2e, pytest.mark.slow(80)]

CI_JOBS = 12
CI_TENSORFLOW_SHARE = 0.25
CI_FAULT_GAP = (2.0, 5.0)  # seconds
# Two of each kind on average, then the jobs finish undisturbed: without a bound, a run
# whose faults slowed its jobs drew more faults (61 in 303 s, seed 974845).
CI_MAX_FAULTS = 14


def test_chaos_soak_breaks_no_invariant(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    need_postgres_server()
    config = SoakConfig(
        jobs=CI_JOBS,
        time_limit=480.0,
        fault_gap=CI_FAULT_GAP,
        max_faults=CI_MAX_FAULTS,
        tensorflow_share=CI_TENSORFLOW_SHARE,
    )
    if os.environ.get("CHAOS_SEED"):
        config.seed = int(os.environ["CHAOS_SEED"])
    lines: list[str] = []
    result = run_soak(config, tmp_path, log=lines.append)
    with capsys.disabled():
        sys.stdout.write("\n" + result.table() + "\n")
    # Every kind of fault was injected at least once (the soak starts with one of each).
    assert all(result.faults[kind] for kind in FAULT_KINDS), result.table()
    assert not result.violations, "\n".join(lines[-80:]) + "\n\n" + result.table()
