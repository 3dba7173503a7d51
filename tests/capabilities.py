"""What this machine can do for the real-stack tests, decided in one place.

A test of the real stack may skip only because the machine lacks something it needs: root
and iproute2 (network namespaces), Debian's Chromium, a redis-server binary. Those skips
go through the functions here, whose reasons start with `LACKS`. Any other skip of a test
under tests/e2e, tests/faults, tests/workers or tests/install is turned into a failure by
tests/conftest.py: on a machine that has what a test needs, a broken setup (an `ip`
command that fails as root, a Chromium that will not start) fails the run instead of
hiding in the skip count. `make test` prints every skip with its reason (`-ra`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

LACKS = "this machine lacks "
CHROMIUM = Path("/usr/bin/chromium")
REAL_STACK_DIRS = frozenset({"e2e", "faults", "workers", "install"})


def has_namespaces() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


def need_namespaces() -> None:
    """Skip unless this process may make network namespaces (root and `ip`)."""
    if not has_namespaces():
        pytest.skip(LACKS + "root and iproute2's `ip` (network namespaces)")


def need_chromium() -> Path:
    """Debian's Chromium (make test installs it), or skip."""
    if not CHROMIUM.exists():
        pytest.skip(LACKS + f"{CHROMIUM} (make test installs it with apt-get)")
    return CHROMIUM


def need_redis_server() -> str:
    """The redis-server binary, or skip."""
    from cli.stack import redis_server_binary

    binary = redis_server_binary()
    if binary is None:
        pytest.skip(LACKS + "a redis-server binary (apt-get install redis-server)")
    return binary


def is_real_stack(path: Path) -> bool:
    """A test file under one of the real-stack directories of tests/."""
    parts = path.parts
    return "tests" in parts and parts[parts.index("tests") + 1] in REAL_STACK_DIRS


def allowed_skip(reason: str) -> bool:
    """A skip that says the machine lacks something (see the module's docstring)."""
    return LACKS in reason
