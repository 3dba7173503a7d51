"""The images, built once per test run by `make images`, as a user builds them.

Every xdist worker of a run asks for them; the first builds (under a file lock), the others
find the run's record and use the same images. `make images` prints the engine it chose
and each image with its size and build time; the whole output is kept in
test-artifacts/images-build.log and the figures in test-artifacts/images.json.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.capabilities import need_container_engine

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
RECORD = ARTIFACTS / "images.json"
BUILD_LOG = ARTIFACTS / "images-build.log"
ENGINE_LINE = re.compile(r"^engine: (?P<engine>\S+) ", re.MULTILINE)
IMAGE_LINE = re.compile(
    r"^image: (?P<ref>\S+) (?P<mb>\d+) MB \(built in (?P<seconds>\d+) s\)$", re.MULTILINE
)
# A cold build (a base from Debian's packages, TensorFlow's wheels) takes minutes.
BUILD_TIMEOUT_S = 1500


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


def _run_id() -> str:
    """The same in every xdist worker of one run, new for the next run."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"


def _build() -> dict[str, Any]:
    started = time.monotonic()
    done = subprocess.run(
        ["make", "--no-print-directory", "images"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    BUILD_LOG.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        pytest.fail(f"`make images` exited {done.returncode} (all in {BUILD_LOG}):\n{tail}")
    engine = ENGINE_LINE.search(done.stdout)
    assert engine is not None, f"`make images` named no engine:\n{done.stdout}"
    images = {
        match["ref"].split(":")[0].removeprefix("cohort-"): {
            "ref": match["ref"],
            "mb": int(match["mb"]),
            "seconds": int(match["seconds"]),
        }
        for match in IMAGE_LINE.finditer(done.stdout)
    }
    return {
        "run": _run_id(),
        "engine": engine["engine"],
        "seconds": round(time.monotonic() - started),
        "images": images,
    }


@pytest.fixture(scope="session")
def images() -> Iterator[Images]:
    need_container_engine()
    ARTIFACTS.mkdir(exist_ok=True)
    with (ARTIFACTS / "images.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record: dict[str, Any] = {}
        if RECORD.exists():
            record = json.loads(RECORD.read_text())
        if record.get("run") != _run_id():
            record = _build()
            RECORD.write_text(json.dumps(record, indent=2) + "\n")
    refs = {target: image["ref"] for target, image in record["images"].items()}
    assert {"control", "worker"} <= refs.keys(), f"`make images` built {sorted(refs)}"
    yield Images(engine=record["engine"], refs=refs)
