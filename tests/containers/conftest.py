"""The images, built once per test run by `make images`, as a user builds them
(tests/containers/images_build.py: `make test` builds them beside the fast suite; else
the first xdist worker that asks, under a file lock, and the others find the run's record).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.capabilities import need_container_engine
from tests.containers import images_build

ROOT = images_build.ROOT


@dataclass(frozen=True)
class Images:
    engine: str
    refs: dict[str, str]  # target (control, worker) -> image reference

    def run(self, target: str, *command: str, network: str = "none") -> str:
        """`command` in a new container of the image, its output (fails the test if
        the command does)."""
        done = subprocess.run(
            [self.engine, "run", "--rm", "--no-healthcheck", "--network", network]
            + [self.refs[target], *command],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, (
            f"{target}: {' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
        return done.stdout

    def inspect(self, target: str) -> dict[str, Any]:
        done = subprocess.run(
            [self.engine, "image", "inspect", self.refs[target]],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        found: list[dict[str, Any]] = json.loads(done.stdout)
        return found[0]


@pytest.fixture(scope="session")
def images() -> Iterator[Images]:
    need_container_engine()
    try:
        record = images_build.built()
    except images_build.BuildFailed as exc:
        pytest.fail(str(exc))
    refs = {target: image["ref"] for target, image in record["images"].items()}
    assert {"control", "worker"} <= refs.keys(), f"`make images` built {sorted(refs)}"
    yield Images(engine=record["engine"], refs=refs)
