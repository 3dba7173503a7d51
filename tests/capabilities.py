"""What this machine can do for the real-stack tests, decided in one place.

A test of the real stack may skip only because the machine lacks something it needs: root
and iproute2 (network namespaces), Debian's Chromium, a redis-server binary, PostgreSQL's
server programs and an account to run them (a server of a test's own), libfaketime (a
process's clock set off), a container engine (docker or podman: the images' tests). Those
skips go through the functions here, whose reasons start with `LACKS`. Any other skip of a
test under tests/e2e, tests/faults, tests/workers, tests/install or tests/containers is
turned into a failure by tests/conftest.py: on a machine that has what a test needs, a
broken setup (an `ip` command that fails as root, a Chromium that will not start, an
engine that cannot build) fails the run instead of hiding in the skip count. `make test`
prints every skip with its reason (`-ra`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

LACKS = "this machine lacks "
CHROMIUM = Path("/usr/bin/chromium")
# LD_PRELOAD it with FAKETIME="+300" and a process's clock (and its children's) is off.
# The one the PyPI package `libfaketime` ships (a dev dependency), not Debian's 0.9.10:
# there, with FAKETIME_DONT_FAKE_MONOTONIC=1 Python 3.11's time.sleep fails with EINVAL
# (libfaketime issue 426), and without it every timed thread wait hangs.
LIBFAKETIME_PACKAGE = "libfaketime"
LIBFAKETIME_SO = Path("vendor", "libfaketime", "src", "libfaketime.so.1")
REAL_STACK_DIRS = frozenset({"e2e", "faults", "workers", "install", "containers"})


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


def libfaketime() -> Path | None:
    """The libfaketime shared object the `libfaketime` package ships, if installed."""
    spec = importlib.util.find_spec(LIBFAKETIME_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    library = Path(spec.origin).parent / LIBFAKETIME_SO
    return library if library.is_file() else None


def need_libfaketime() -> Path:
    """libfaketime (`make install` installs it with the dev dependencies), or skip."""
    library = libfaketime()
    if library is None:
        pytest.skip(
            LACKS + "libfaketime (pip install the `libfaketime` package: the dev dependencies)"
        )
    return library


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


def need_postgres_server() -> None:
    """PostgreSQL's server programs (initdb, pg_ctl) and an account to run them as
    (PostgreSQL refuses root: as root, the `postgres` user through `runuser`), or skip."""
    from tests.pgserver import binary, server_user

    if binary("initdb") is None or binary("pg_ctl") is None:
        pytest.skip(LACKS + "PostgreSQL's initdb and pg_ctl (apt-get install postgresql)")
    if server_user() is None:
        pytest.skip(LACKS + "a `postgres` account and `runuser` to run PostgreSQL as non-root")


CAP_SYS_ADMIN = 21  # the capability mount(2) needs (linux/capability.h)


def has_mount() -> bool:
    """Root with CAP_SYS_ADMIN (a container may have root without it) and `mount`."""
    if os.geteuid() != 0 or shutil.which("mount") is None or shutil.which("umount") is None:
        return False
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    effective = next(
        (line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), "0"
    )
    return bool(int(effective, 16) >> CAP_SYS_ADMIN & 1)


def need_mount() -> None:
    """Skip unless this process may mount a filesystem of its own (a small tmpfs)."""
    if not has_mount():
        pytest.skip(LACKS + "root with CAP_SYS_ADMIN and `mount` (a small tmpfs of its own)")


CONTAINER_ENGINES = ("docker", "podman")


def container_engine() -> str | None:
    """COHORT_ENGINE, else docker, else podman: the first installed, if any. Whether it
    works is not asked here (`make images` chooses among those that answer): an engine
    installed but broken fails the tests instead of skipping them."""
    chosen = os.environ.get("COHORT_ENGINE")
    if chosen:
        return chosen if shutil.which(chosen) else None
    return next((engine for engine in CONTAINER_ENGINES if shutil.which(engine)), None)


def need_container_engine() -> str:
    """docker or podman (`.ci/run` installs podman and runc), or skip."""
    engine = container_engine()
    if engine is None:
        pytest.skip(LACKS + "a container engine (docker or podman: .ci/run installs them)")
    return engine
