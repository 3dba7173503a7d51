"""The chaos soak at the CI size (tests/chaos/soak.py; `make chaos` runs the large one):
a few dozen small jobs on three agents under every kind of fault, and no invariant broken."""

from __future__ import annotations

import os
import sys

import pytest

from tests.capabilities import need_postgres_server
from tests.chaos.faults import FAULT_KINDS
from tests.chaos.soak import SoakConfig, run_soak

pytestmark = [pytest.mark.e2e, pytest.mark.slow(185)]

CI_JOBS = 12


def test_chaos_soak_breaks_no_invariant(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    need_postgres_server()
    config = SoakConfig(jobs=CI_JOBS, time_limit=480.0)
    if os.environ.get("CHAOS_SEED"):
        config.seed = int(os.environ["CHAOS_SEED"])
    lines: list[str] = []
    result = run_soak(config, tmp_path, log=lines.append)
    with capsys.disabled():
        sys.stdout.write("\n" + result.table() + "\n")
    # Every kind of fault was injected at least once (the soak starts with one of each).
    assert all(result.faults[kind] for kind in FAULT_KINDS), result.table()
    assert not result.violations, "\n".join(lines[-80:]) + "\n\n" + result.table()
