"""Which skips a real-stack test may take (tests/capabilities.py)."""

from pathlib import Path

import pytest

from tests.capabilities import (
    LACKS,
    allowed_skip,
    is_real_stack,
    libfaketime,
    need_chromium,
    need_libfaketime,
)


@pytest.mark.parametrize(
    ("path", "real"),
    [
        ("tests/e2e/test_dashboard.py", True),
        ("/work/x/tests/faults/test_node_faults.py", True),
        ("tests/workers/test_runner_local.py", True),
        ("tests/install/test_installed_wheel.py", True),
        ("tests/api/test_jobs.py", False),
        ("tests/unit/test_e2e_names.py", False),
    ],
)
def test_the_real_stack_directories(path: str, real: bool) -> None:
    assert is_real_stack(Path(path)) is real


def test_only_a_missing_capability_is_an_allowed_skip() -> None:
    assert allowed_skip(f"Skipped: {LACKS}a redis-server binary")
    assert not allowed_skip("Skipped: multi-host test needs network namespaces: `ip` failed")
    assert not allowed_skip("could not import 'playwright.sync_api'")


def test_chromium_present_is_returned_not_skipped() -> None:
    if not Path("/usr/bin/chromium").exists():
        with pytest.raises(pytest.skip.Exception, match=LACKS):
            need_chromium()
    else:
        assert need_chromium() == Path("/usr/bin/chromium")


def test_libfaketime_present_is_returned_not_skipped() -> None:
    library = libfaketime()
    if library is None:
        with pytest.raises(pytest.skip.Exception, match=LACKS):
            need_libfaketime()
    else:
        assert need_libfaketime() == library and library.name == "libfaketime.so.1"
