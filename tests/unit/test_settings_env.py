"""List settings from the environment, read by a real process as a user sets them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PRINT_ENTRYPOINTS = (
    "import json; from services.settings import Settings; "
    "print(json.dumps(Settings().ALLOWED_ENTRYPOINTS))"
)


def entrypoints_seen_by_a_process(value: str) -> list[str]:
    env = {**os.environ, "COHORT_ALLOWED_ENTRYPOINTS": value}
    done = subprocess.run(
        [sys.executable, "-c", PRINT_ENTRYPOINTS],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("mypkg.train:main", ["mypkg.train:main"]),
        ("mypkg.train:main,other.mod:fn", ["mypkg.train:main", "other.mod:fn"]),
        (" mypkg.train:main , other.mod:fn ,", ["mypkg.train:main", "other.mod:fn"]),
        ('["mypkg.train:main", "other.mod:fn"]', ["mypkg.train:main", "other.mod:fn"]),
        ("", []),
    ],
)
def test_allowed_entrypoints_parse_in_comma_and_json_form(value: str, expected: list[str]) -> None:
    assert entrypoints_seen_by_a_process(value) == expected


def test_the_cli_runs_with_the_comma_form_set(tmp_path: object) -> None:
    # Before: every process died at start with SettingsError on this variable.
    env = {
        **os.environ,
        "COHORT_ALLOWED_ENTRYPOINTS": "mypkg.train:main",
        "COHORT_DATA_DIR": str(tmp_path),
        "COHORT_DATABASE_URL": "",
    }
    cohort = os.path.join(os.path.dirname(sys.executable), "cohort")
    done = subprocess.run(
        [cohort, "migrate"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("value", "expected"), [("8", 8), ("", None), ("none", None), ("unlimited", None)]
)
def test_quota_defaults_take_a_number_or_no_limit(value: str, expected: int | None) -> None:
    env = {**os.environ, "COHORT_QUOTA_MAX_GPUS": value}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from services.settings import Settings; print(Settings().QUOTA_MAX_GPUS)",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(expected)


def test_a_negative_quota_stops_the_process_naming_the_variable() -> None:
    env = {**os.environ, "COHORT_QUOTA_MAX_QUEUED_JOBS": "-1"}
    done = subprocess.run(
        [sys.executable, "-c", "from services.settings import Settings; Settings()"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0 and "QUOTA_MAX_QUEUED_JOBS" in done.stderr


def scheduler_lock_seen(ttl: str, interval: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COHORT_SCHEDULER_LOCK_TTL": ttl, "COHORT_SCHEDULER_INTERVAL": interval}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from services.settings import Settings; print(Settings().SCHEDULER_LOCK_TTL)",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_scheduler_lock_shorter_than_two_intervals_is_refused_naming_both() -> None:
    # The leader renews its lock once a loop, which waits up to an interval for events.
    refused = scheduler_lock_seen("1", "1")
    assert refused.returncode != 0
    assert (
        "COHORT_SCHEDULER_LOCK_TTL (1) must be at least twice COHORT_SCHEDULER_INTERVAL"
        in refused.stderr
    )
    taken = scheduler_lock_seen("2", "1")
    assert (taken.returncode, taken.stdout.strip()) == (0, "2.0"), taken.stderr


def preload_seen(value: str | None) -> subprocess.CompletedProcess[str]:
    """A process's COHORT_REPLICA_POOL_PRELOAD, set to `value` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "COHORT_REPLICA_POOL_PRELOAD"}
    if value is not None:
        env["COHORT_REPLICA_POOL_PRELOAD"] = value
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from services.settings import Settings; "
            "print(json.dumps(Settings().REPLICA_POOL_PRELOAD))",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("pandas", ["pandas"]),
        (" pandas , sklearn.metrics,", ["pandas", "sklearn.metrics"]),
        ('["pandas", "sklearn.metrics"]', ["pandas", "sklearn.metrics"]),
        ("", []),
        (
            None,
            [
                "sklearn.datasets",
                "sklearn.metrics",
                "sklearn.model_selection",
                "sklearn.preprocessing",
            ],
        ),
    ],
)
def test_warm_processes_preload_parses_in_comma_and_json_form(
    value: str | None, expected: list[str]
) -> None:
    seen = preload_seen(value)
    assert seen.returncode == 0, seen.stderr
    assert json.loads(seen.stdout) == expected


@pytest.mark.parametrize("value", ["os; rm -rf /", "../evil", "a..b", "1pkg", "pkg-name"])
def test_a_preload_that_is_no_module_name_stops_the_process_naming_the_variable(
    value: str,
) -> None:
    # The names reach only `importlib.import_module` in the warm process, never a shell
    # or a path: anything but a dotted module name is refused where it is set.
    seen = preload_seen(f"pandas,{value}")
    assert seen.returncode != 0
    assert "REPLICA_POOL_PRELOAD" in seen.stderr and "pattern" in seen.stderr
