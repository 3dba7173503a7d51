"""The ports `cohort up` takes when none is set (cli/stack_ports.py): a replica range no
other stack on this machine holds, held until the stack ends; explicit settings as given."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cli.stack_ports import RANGE_WIDTH, claim_range, listener_port
from services.settings import Settings


def test_two_stacks_claim_different_ranges_until_one_ends() -> None:
    settings = Settings()
    first, first_end, first_lock = claim_range(settings)
    second, _, second_lock = claim_range(settings)
    assert first_lock is not None and second_lock is not None
    try:
        assert first_end == first + RANGE_WIDTH - 1
        assert abs(first - second) >= RANGE_WIDTH
    finally:
        os.close(first_lock)
    again, _, again_lock = claim_range(settings)
    assert again_lock is not None
    os.close(again_lock)
    os.close(second_lock)
    assert again == first  # freed when its holder's descriptor closed


def test_an_explicit_range_is_used_as_given_without_a_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COHORT_PORT_RANGE_START", "41000")
    assert claim_range(Settings()) == (41000, 41499, None)


def test_an_unset_listener_port_moves_off_a_taken_one() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        port = listener_port(Settings(), "API_PORT", taken)
        assert port != taken


def test_a_taken_explicit_port_stops_cohort_up_in_one_line_naming_it(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
        env |= {"COHORT_DATA_DIR": str(tmp_path / "var"), "COHORT_API_PORT": str(taken)}
        cohort = str(Path(sys.executable).parent / "cohort")
        done = subprocess.run(
            [cohort, "up"], env=env, capture_output=True, text=True, timeout=60, check=False
        )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"cohort: port {taken} (COHORT_API_PORT) is taken by another process: stop it, or "
        "choose another port, or unset COHORT_API_PORT to let `cohort up` choose"
    ]
