"""A bundle being checked holds no database lock (issue 29, finding 5).

On the default stack (`cohort up`: SQLite in WAL mode, the embedded Redis), project A
uploads a 1 MB bundle that unpacks to 1 GB, which takes the api seconds to check, while
project B submits jobs one after another. Each of B's submissions answers
201 within a second while A's check runs: the check holds no session, no transaction and
no write lock (api/routes/bundles.py, services/jobs/bundles.accept_bundle), and A's token's
`last_used_at` is written in a short transaction of its own (api/deps.record_use). Before,
that write was the first statement of the upload's transaction, and the lock it took was
held for the whole check: B's submissions waited for it, then answered 503.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cli.stack import Stack
from tests.e2e.conftest import PORT_BASE, free_port
from tests.hostile_bundles import Zeros

pytestmark = [pytest.mark.e2e, pytest.mark.slow(30)]

UNPACKED = 10**9  # bytes of zeros in the bundle's one file
# Large enough that the bundle is accepted: its check then reads it all through.
LIMIT = 2 * UNPACKED
ANSWER_WITHIN = 1.0  # seconds, for each of B's submissions
# B's jobs stay queued (no agent: see `default_stack`); the scheduler's passes over them
# are SQLite's other writer, as on a busy cluster.
B_JOB = {"name": "beside-the-check", "trainer": "mlp_digits", "replicas": 1}


@pytest.fixture(scope="module")
def zero_bomb(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A .tar.gz of one 1 GB file of zeros (about 1 MB), written as it is compressed;
    its path and digest."""
    path = tmp_path_factory.mktemp("bomb") / "zeros.tar.gz"
    with tarfile.open(path, "w:gz", compresslevel=9) as tar:
        info = tarfile.TarInfo("zeros.bin")
        info.size, info.mode = UNPACKED, 0o644
        tar.addfile(info, io.BufferedReader(Zeros(UNPACKED), 1 << 20))
    return path, "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def default_stack(tmp_path: Path) -> Iterator[Stack]:
    """The stack as `cohort up` runs it: SQLite under DATA_DIR, the embedded Redis, the
    api and the scheduler, the two processes that write to SQLite. Not the agent, which
    writes nothing there and, run as root, starts only where a replica's uid can run this
    interpreter (not one under a 0700 /root); no replica runs meanwhile, so the CPUs go
    to the api and the scheduler."""
    stack = Stack(
        {
            "COHORT_DATABASE_URL": "",
            "COHORT_REDIS_URL": "",
            "COHORT_DATA_DIR": str(tmp_path / "var"),
            "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
            "COHORT_PORT_RANGE_START": PORT_BASE,
            "COHORT_API_PORT": str(free_port()),
            "COHORT_MAX_BUNDLE_UNPACKED_BYTES": str(LIMIT),
        },
        quiet=True,
    )
    stack.start(parts=("api", "scheduler"))
    try:
        yield stack
    finally:
        stack.stop()


def project_token(stack: Stack, project: str) -> dict[str, str]:
    """Headers with a new `submit` token of `project`, issued by the admin api."""
    response = httpx.post(
        f"{stack.url}/api/v1/tokens",
        timeout=30,
        headers={"Authorization": f"Bearer {stack.token}"},
        json={"project": project, "name": "ci", "scopes": ["read", "submit"]},
    )
    assert response.status_code == 201, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


class Submissions(threading.Thread):
    """B submitting jobs one after another until told to stop; each timed."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=url, headers=headers, timeout=60)
        self.done: list[tuple[float, float, int, str]] = []  # started, ended, status, body
        self.stop = threading.Event()

    def run(self) -> None:
        with self.client:
            while not self.stop.is_set():
                started = time.monotonic()
                response = self.client.post("/api/v1/jobs", json=B_JOB)
                self.done.append(
                    (started, time.monotonic(), response.status_code, response.text[:200])
                )
                self.stop.wait(0.05)


def test_other_projects_submit_within_a_second_while_a_1gb_bundle_is_checked(
    default_stack: Stack, zero_bomb: tuple[Path, str]
) -> None:
    stack, (bundle, digest) = default_stack, zero_bomb
    a, b = project_token(stack, "tenant-a"), project_token(stack, "tenant-b")
    response = httpx.post(f"{stack.url}/api/v1/jobs", json=B_JOB, headers=b, timeout=60)
    assert response.status_code == 201, response.text  # B's token and the api warmed up
    submissions = Submissions(stack.url, b)
    submissions.start()
    time.sleep(0.5)
    # A's token is used for the first time by the upload: its last use is due to be
    # written, as it is for any token idle for a minute.
    started = time.monotonic()
    upload = httpx.put(
        f"{stack.url}/api/v1/bundles/{digest}", content=bundle.read_bytes(), headers=a, timeout=600
    )
    ended = time.monotonic()
    time.sleep(0.5)
    submissions.stop.set()
    submissions.join(timeout=120)

    assert upload.status_code == 201, upload.text
    done = submissions.done
    during = [s for s in done if started < s[0] and s[1] < ended]
    # The check really overlapped them: A's request began before they did, ended after.
    assert len(during) >= 3, (f"A's upload took {ended - started:.2f} s", done)
    slow = [
        (round(end - start, 2), status, text)
        for start, end, status, text in done
        if status != 201 or end - start > ANSWER_WITHIN
    ]
    assert not slow, (
        f"{len(slow)} of B's {len(done)} submissions were refused or waited "
        f"over {ANSWER_WITHIN} s while A's bundle was checked "
        f"({ended - started:.1f} s): {slow[:5]}"
    )
