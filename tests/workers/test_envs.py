"""A node's job environments (workers/node/envs.py) with real pip from the node's index:
built once per requirements, reused, built once for two jobs asking together, never
cached half-built, evicted least recently used first but never in use; as root, pip runs
as the build uid; and the agent runs a replica in its job's environment, or fails it
(permanently) with pip's own words."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from services.exit_codes import FailureKind, classify
from services.settings import Settings
from services.wire.keys import attempt_key, claim_key
from services.wire.replica import ReplicaSpec, StartReplica
from tests.workers.test_agent_bundles import bus as bus  # the fixture
from tests.workers.test_agent_bundles import exits
from workers.node import envs_build
from workers.node.agent import Agent
from workers.node.envs import EnvCache, RequirementsFailed, env_key
from workers.node.isolation import is_root

PYTHON = sys.executable
JOBS = (730001, 730002)
# Small, pure Python, and not in the node's environment (checked below).
PACKAGE = "tabulate==0.9.0"
OTHER = "text-unidecode==1.3"
UID_BASE = Settings().REPLICA_UID_BASE


def cache(root: Path, max_bytes: int = 5 << 30) -> EnvCache:
    return EnvCache(root, PYTHON, max_bytes, envs_build.build_uid(UID_BASE) if is_root() else None)


def ensure(envs: EnvCache, lines: list[str]) -> tuple[str, str, float]:
    log = io.StringIO()
    started = time.monotonic()
    python = envs.ensure(lines, log)
    return python, log.getvalue(), time.monotonic() - started


def test_the_package_is_not_the_nodes_already() -> None:
    found = subprocess.run([PYTHON, "-c", "import tabulate"], capture_output=True)
    assert found.returncode != 0, "pick a package the node lacks"


def test_an_environment_has_its_packages_and_the_nodes(tmp_path: Path) -> None:
    envs = cache(tmp_path)
    python, log, took = ensure(envs, [PACKAGE])
    assert log.startswith("cohort: installing 1 package: tabulate==0.9.0\n")
    assert "Successfully installed tabulate-0.9.0" in log
    script = (
        "import importlib.util as u, tabulate, workers.replica.runner; "
        "print(tabulate.__file__); print(u.find_spec('tensorflow').origin)"
    )
    done = subprocess.run([python, "-I", "-c", script], capture_output=True, text=True, check=True)
    own, tensorflow = done.stdout.splitlines()
    assert own.startswith(str(envs.root / env_key(PYTHON, [PACKAGE])))
    assert not tensorflow.startswith(str(envs.root))  # the node's TensorFlow
    # The finished tree is the agent's: no replica, nor the build uid, can change it.
    env = Path(python).parent.parent
    assert env.stat().st_uid == os.geteuid() and not env.stat().st_mode & 0o022
    assert not [p for p in envs.root.iterdir() if p.name.startswith(".build-")]
    print(f"cold build of {PACKAGE}: {took:.2f}s")  # noqa: T201 - visible with -s


def test_a_second_job_with_the_same_requirements_reuses_the_environment(tmp_path: Path) -> None:
    envs = cache(tmp_path)
    first, _, cold = ensure(envs, [PACKAGE])
    again, log, warm = ensure(envs, [PACKAGE])
    assert again == first and "using the environment" in log and "pip" not in log.lower()
    assert warm < cold / 10, (cold, warm)
    print(f"cold {cold:.2f}s, cached {warm * 1000:.1f}ms")  # noqa: T201 - visible with -s


def test_two_jobs_asking_together_build_once(tmp_path: Path) -> None:
    envs = cache(tmp_path)
    logs: list[str] = []
    barrier = threading.Barrier(2)

    def job() -> None:
        barrier.wait()
        logs.append(ensure(envs, [OTHER])[1])

    threads = [threading.Thread(target=job) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum("Successfully installed" in log for log in logs) == 1, logs
    assert sum("using the environment" in log for log in logs) == 1, logs
    assert len([p for p in envs.root.iterdir() if p.is_dir() and len(p.name) == 32]) == 1


def test_a_misspelt_package_fails_with_pips_message_and_nothing_is_cached(
    tmp_path: Path,
) -> None:
    envs = cache(tmp_path)
    with pytest.raises(RequirementsFailed) as caught:
        ensure(envs, ["tabulatte-no-such-package==0.9.0"])
    message = str(caught.value)
    assert "tabulatte-no-such-package" in message and "ERROR:" in message, message
    assert [p.name for p in envs.root.iterdir()] == [".locks"]  # nothing half-built
    with pytest.raises(RequirementsFailed):  # and the next job tries again
        ensure(envs, ["tabulatte-no-such-package==0.9.0"])


def test_eviction_goes_least_recently_used_first_and_never_in_use(tmp_path: Path) -> None:
    envs = cache(tmp_path, max_bytes=1)
    first, _, _ = ensure(envs, [PACKAGE])  # in use: never evicted
    second, _, _ = ensure(envs, [OTHER])
    assert Path(first).exists() and Path(second).exists()
    envs.release(first)
    envs.release(second)
    third, _, _ = ensure(envs, [PACKAGE, OTHER])  # the cache is over its bound
    assert not Path(first).exists() and not Path(second).exists() and Path(third).exists()
    assert envs.evict() == []  # the one in use stays, over the bound or not


EVIL_SETUP = """
import os, subprocess
from setuptools import setup
out = {out!r}
with open(os.path.join(out, "uid"), "w") as f:
    f.write(str(os.getuid()))
try:
    open({protected!r}, "w").write("owned")
except OSError as exc:
    open(os.path.join(out, "refused"), "w").write(str(exc))
daemon = subprocess.Popen(["sleep", "300"], start_new_session=True, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
open(os.path.join(out, "daemon"), "w").write(str(daemon.pid))
setup(name="evilpkg", version="1.0", py_modules=[])
"""


@pytest.mark.skipif(not is_root(), reason="pip runs as a build uid only under a root agent")
def test_a_packages_setup_py_runs_as_the_build_uid_and_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    links, out = tmp_path / "links", tmp_path / "out"
    links.mkdir()
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    protected = tmp_path / "root-only"
    protected.mkdir(mode=0o755)
    setup_py = EVIL_SETUP.format(out=str(out), protected=str(protected / "owned"))
    with tarfile.open(links / "evilpkg-1.0.tar.gz", "w:gz") as tar:
        for name, text in {
            "setup.py": setup_py,
            "PKG-INFO": "Name: evilpkg\nVersion: 1.0\n",
        }.items():
            data = textwrap.dedent(text).encode()
            info = tarfile.TarInfo(f"evilpkg-1.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    # The node's pip settings reach the build: here, a local index of one sdist.
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")  # setuptools: the node's
    envs = cache(tmp_path / "data")
    ensure(envs, ["evilpkg==1.0"])
    assert int((out / "uid").read_text()) == envs_build.build_uid(UID_BASE) < UID_BASE
    assert (out / "refused").exists() and not (protected / "owned").exists()
    daemon = int((out / "daemon").read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{daemon}").exists() and time.monotonic() < deadline:
        status = (
            Path(f"/proc/{daemon}/status").read_text() if Path(f"/proc/{daemon}").exists() else ""
        )
        if "zombie" in status:
            break
        time.sleep(0.05)
    status = Path(f"/proc/{daemon}/status").read_text() if Path(f"/proc/{daemon}").exists() else ""
    assert not status or "zombie" in status, "the build left its daemon running"


@pytest.fixture
def agent(tmp_path: Path, bus: redis.Redis) -> Iterator[Agent]:
    # This node's claims of earlier runs' replicas would fence these starts.
    bus.delete(*(key(job) for job in JOBS for key in (attempt_key, lambda j: claim_key(j, 1, 0))))
    node = Agent(
        Settings(
            DATA_DIR=tmp_path / "data",
            NODE_ID="envs",
            NODE_KEY="cd" * 32,
            ARTIFACT_URL=str(tmp_path / "store"),
        ),
        bus,
    )
    yield node
    node.shutdown(grace=2)


def start(job_id: int, requirements: list[str]) -> StartReplica:
    script = "import sys, tabulate; print('python', sys.executable); print(tabulate.__version__)"
    spec = ReplicaSpec(
        job_id,
        1,
        0,
        1,
        None,
        "one_device",
        {},
        command=["python", "-c", script],
        requirements=requirements,
    )
    return StartReplica("envs", spec)


def test_the_agent_runs_a_replica_in_its_jobs_environment(
    agent: Agent,
    bus: redis.Redis,
    tmp_path: Path,
) -> None:
    agent.start_replica(start(730001, [PACKAGE]))
    (done,) = exits(bus, 730001, timeout=120)
    assert done["exit_code"] == 0, done
    log = (tmp_path / "data").rglob("replica-0.log")
    text = "\n".join(path.read_text() for path in log)
    assert "cohort: installing 1 package: tabulate==0.9.0" in text and "0.9.0" in text
    assert f"python {tmp_path / 'data' / 'envs'}" in text
    assert agent.preparer.envs._in_use == {}  # released once the replica ended


def test_a_pip_failure_fails_the_replica_for_good_with_pips_words(
    agent: Agent,
    bus: redis.Redis,
) -> None:
    agent.start_replica(start(730002, ["tabulatte-no-such-package==1.0"]))
    (done,) = exits(bus, 730002, timeout=120)
    assert done["never_started"] and "tabulatte-no-such-package" in done["log_tail"], done
    assert classify(done["exit_code"], done["log_tail"]) == FailureKind.PERMANENT
