"""The images of one test run, built once by `make images` (under a file lock; the figures
in test-artifacts/images.json, the whole output in test-artifacts/images-build.log).

`make test` runs this module beside lint and the fast suite (`python -m
tests.containers.images_build`, COHORT_TEST_RUN naming the run), so that the real-process
suite finds the run's images built instead of one xdist worker building them while the
other waits on the lock. Run alone, tests/containers builds them itself, once per run.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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


class BuildFailed(Exception):
    """`make images` failed; the message says how, with its output's tail."""


def run_id() -> str:
    """The same in every process of one run (`make test`'s COHORT_TEST_RUN, else every
    xdist worker's run id), new for the next run."""
    return (
        os.environ.get("COHORT_TEST_RUN")
        or os.environ.get("PYTEST_XDIST_TESTRUNUID")
        or f"pid-{os.getpid()}"
    )


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
        raise BuildFailed(f"`make images` exited {done.returncode} (all in {BUILD_LOG}):\n{tail}")
    engine = ENGINE_LINE.search(done.stdout)
    if engine is None:
        raise BuildFailed(f"`make images` named no engine:\n{done.stdout}")
    images = {
        match["ref"].split(":")[0].removeprefix("cohort-"): {
            "ref": match["ref"],
            "mb": int(match["mb"]),
            "seconds": int(match["seconds"]),
        }
        for match in IMAGE_LINE.finditer(done.stdout)
    }
    return {
        "run": run_id(),
        "engine": engine["engine"],
        "seconds": round(time.monotonic() - started),
        "images": images,
    }


def built() -> dict[str, Any]:
    """This run's record of its images, building them first if no process of the run has."""
    ARTIFACTS.mkdir(exist_ok=True)
    with (ARTIFACTS / "images.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record: dict[str, Any] = {}
        if RECORD.exists():
            record = json.loads(RECORD.read_text())
        if record.get("run") != run_id():
            record = _build()
            RECORD.write_text(json.dumps(record, indent=2) + "\n")
    return record


def main() -> int:
    from tests.capabilities import container_engine

    if container_engine() is None:
        print("images: no container engine here; tests/containers will say so")  # noqa: T201
        return 0
    try:
        record = built()
    except BuildFailed as exc:
        print(exc, file=sys.stderr)  # noqa: T201
        return 1
    print(f"images: {json.dumps(record['images'])} ({record['seconds']} s)")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
