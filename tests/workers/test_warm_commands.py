"""`python train.py` and `python -m pkg.train` commands handed to warm processes, for real:
two agents as root, one keeping warm TensorFlow processes and one starting every replica
cold, run the same command of the same bundle; what the program sees (sys.argv,
sys.orig_argv, sys.path, the working directory, __file__, __main__, the environment's
names, signal handlers, threads, interpreter flags, a subprocess, multiprocessing with
fork and with spawn), how it ends (sys.exit, an uncaught exception's traceback, SIGUSR1
with and without a handler) and what the agent reports are the same both ways. A bundle
holding a module of a name the warm process has imported (its own numpy.py) starts cold,
and its script imports its own module, as a fresh interpreter does."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from services.wire.keys import attempt_key, claim_key
from services.wire.replica import ReplicaSpec, StartReplica
from tests.conftest import redis_url
from tests.workers.test_agent_pool import (
    JOB,
    alive,
    event,
    newest,
    running_agent,
    wait_for,
)
from workers import layout
from workers.node.agent import Agent

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="isolation needs an agent as root")

BASE = JOB + 50  # job ids of this module; warm jobs BASE+n, their cold twins BASE+20+n
COLD = 20

# What the program sees, printed as one line; then how it ends, by its first argument.
PROBE = """\
import json, os, signal, subprocess, sys, threading, time, multiprocessing as mp

def square(x):
    return x * x

def handlers():
    out = {}
    for number in signal.valid_signals():
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            handler = signal.getsignal(number)
            if isinstance(handler, signal.Handlers):
                out[int(number)] = handler.name
            else:
                out[int(number)] = getattr(handler, "__name__", str(handler))
    return out

if __name__ == "__main__":
    import __main__
    child = [sys.executable, "-c", "import sys; print(sys.argv, sys.flags.safe_path)"]
    seen = {
        "argv": sys.argv, "orig_argv": sys.orig_argv[1:], "path": sys.path,
        "cwd": os.getcwd(), "file": __file__, "name": __name__, "globals": sorted(globals()),
        "loader": type(__loader__).__name__, "spec": getattr(__spec__, "name", None),
        "flags": list(sys.flags), "main": __main__.__dict__ is globals(),
        "handlers": handlers(), "threads": [t.name for t in threading.enumerate()],
        "env": sorted(os.environ), "executable": sys.executable,
        "child": subprocess.run(child, capture_output=True, text=True).stdout,
        "fork": mp.get_context("fork").Pool(2).map(square, [1, 2, 3]),
        "spawn": mp.get_context("spawn").Pool(1).map(square, [4]),  # pickles __main__.square
    }
    print("SEEN " + json.dumps(seen), flush=True)
    what = sys.argv[1]
    if what == "raise":
        raise RuntimeError("the program's own error")
    if what in ("wait", "handle"):
        if what == "handle":
            signal.signal(signal.SIGUSR1, lambda _signum, _frame: sys.exit(75))
        print("WAITING", flush=True)
        time.sleep(600)
    sys.exit(int(what))
"""
FILES = {"probe.py": PROBE, "pkg/__init__.py": "", "pkg/train.py": PROBE}
# A bundle whose directory shadows a module every warm process has imported.
SHADOWING = {
    "uses_numpy.py": "import numpy\nprint('NUMPY', numpy.ORIGIN, flush=True)\n",
    "numpy.py": "ORIGIN = 'the job'\n",
}


@pytest.fixture(scope="module")
def bus() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url("agent"), decode_responses=True)
    jobs = range(BASE, BASE + 2 * COLD)
    client.delete(*(attempt_key(j) for j in jobs), *(claim_key(j, 1, 0) for j in jobs))
    yield client
    client.close()


@pytest.fixture(scope="module")
def agents(
    replicas_tmp_root: Path,
    bus: redis.Redis,
) -> Iterator[tuple[Agent, Agent, Agent]]:
    """A warm agent (two warm processes), a cold one (none), both with FILES' bundle; and
    a warm one with SHADOWING's (its own warm process)."""
    root = replicas_tmp_root
    with (
        running_agent(root / "warm-cmd", bus, "warm-cmd", 2, FILES) as warm,
        running_agent(root / "cold-cmd", bus, "cold-cmd", 0, FILES) as cold,
        running_agent(root / "shadow-cmd", bus, "shadow-cmd", 1, SHADOWING) as shadow,
    ):
        yield warm, cold, shadow


def ready(agent: Agent, count: int) -> set[int]:
    return set(
        wait_for(
            lambda: len(pids := agent.pool.ready_pids()) == count and pids,
            600,
            f"{count} warm processes",
        )
    )


def run(agent: Agent, job_id: int, command: list[str]) -> None:
    spec = ReplicaSpec(
        job_id,
        1,
        0,
        1,
        None,
        "one_device",
        command=command,
        bundle=agent.bundle,  # type: ignore[attr-defined]
    )
    agent.start_replica(StartReplica(agent.node_id, spec))


def log_of(agent: Agent, job_id: int) -> str:
    return layout.log_file(agent.data_dir, job_id, 1, 0).read_text()


def seen(agent: Agent, job_id: int) -> dict[str, Any]:
    """What the probe printed, its job's own paths and ids made neutral."""
    line = wait_for(
        lambda: next((x for x in log_of(agent, job_id).splitlines() if x.startswith("SEEN ")), ""),
        120,
        f"job {job_id}'s probe",
    )
    text = line[len("SEEN ") :]
    for path in (
        layout.work_dir(agent.data_dir, job_id, 1, 0),
        layout.tmp_dir(agent.data_dir, job_id),
    ):
        text = text.replace(str(path), "<job>")
    found: dict[str, Any] = json.loads(text)
    return found


def traceback_of(agent: Agent, job_id: int) -> str:
    log = log_of(agent, job_id)
    text = log[log.index("Traceback") :]
    return text.replace(str(layout.work_dir(agent.data_dir, job_id, 1, 0)), "<job>")


def both_ways(
    agents: tuple[Agent, Agent, Agent],
    bus: redis.Redis,
    n: int,
    command: list[str],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Start `command` warm and cold; the two replicas' events once both exited."""
    warm, cold, _ = agents
    pool = ready(warm, 2)
    since = newest(bus)
    run(warm, BASE + n, command)
    run(cold, BASE + COLD + n, command)
    started = event(bus, "replica_started", BASE + n, since)
    assert started["pid"] in pool, "not handed to a warm process"
    assert f"cohort: warm replica: process {started['pid']} was ready" in log_of(warm, BASE + n)
    cold_started = event(bus, "replica_started", BASE + COLD + n, since)
    assert "warm replica" not in log_of(cold, BASE + COLD + n)
    return started | {"since": since}, cold_started | {"since": since}


def exit_codes(bus: redis.Redis, n: int, since: str) -> tuple[int, int]:
    return (
        event(bus, "replica_exited", BASE + n, since)["exit_code"],
        event(bus, "replica_exited", BASE + COLD + n, since)["exit_code"],
    )


@pytest.mark.parametrize(
    ("n", "command"),
    [(0, ["python", "probe.py", "3"]), (1, ["python3", "-u", "-m", "pkg.train", "4"])],
    ids=["script", "module"],
)
def test_a_python_command_sees_and_ends_as_under_a_fresh_interpreter(
    agents: tuple[Agent, Agent, Agent],
    bus: redis.Redis,
    n: int,
    command: list[str],
) -> None:
    warm, cold, _ = agents
    started, _ = both_ways(agents, bus, n, command)
    assert exit_codes(bus, n, started["since"]) == (3 + n, 3 + n)  # its sys.exit, both ways
    got, want = seen(warm, BASE + n), seen(cold, BASE + COLD + n)
    assert got == want
    # And what a fresh interpreter gives, spelled out.
    assert got["argv"][1:] == [str(3 + n)] and got["orig_argv"] == command[1:]
    assert got["path"][0] == "<job>/code" and got["cwd"] == "<job>/code"
    assert got["file"] == "<job>/code/" + ("probe.py" if n == 0 else "pkg/train.py")
    assert got["main"] and got["name"] == "__main__"
    assert got["fork"] == [1, 4, 9] and got["spawn"] == [16]
    assert got["threads"] == ["MainThread"] and got["handlers"][str(signal.SIGUSR1)] == "SIG_DFL"
    assert not alive(started["pid"])


def test_an_uncaught_exception_reads_and_exits_as_under_a_fresh_interpreter(
    agents: tuple[Agent, Agent, Agent],
    bus: redis.Redis,
) -> None:
    warm, cold, _ = agents
    started, _ = both_ways(agents, bus, 2, ["python", "probe.py", "raise"])
    assert exit_codes(bus, 2, started["since"]) == (1, 1)
    got, want = traceback_of(warm, BASE + 2), traceback_of(cold, BASE + COLD + 2)
    assert got == want
    assert re.match(r'Traceback[^\n]*\n  File "<job>/code/probe.py", line \d+, in <module>', got)


@pytest.mark.parametrize(("n", "how", "code"), [(3, "wait", 138), (4, "handle", 75)])
def test_sigusr1_ends_a_python_command_as_its_own_handling_says(
    agents: tuple[Agent, Agent, Agent],
    bus: redis.Redis,
    n: int,
    how: str,
    code: int,
) -> None:
    warm, cold, _ = agents
    started, cold_started = both_ways(agents, bus, n, ["python", "probe.py", how])
    for agent, job_id, pid in (
        (warm, BASE + n, started["pid"]),
        (cold, BASE + COLD + n, cold_started["pid"]),
    ):
        waiting = f"job {job_id} to wait"
        wait_for(lambda: "WAITING" in log_of(agent, job_id), 120, waiting)  # noqa: B023
        os.killpg(pid, signal.SIGUSR1)  # what the agent's "checkpoint now" sends
    assert exit_codes(bus, n, started["since"]) == (code, code)


def test_a_bundle_that_shadows_a_preloaded_module_starts_cold_and_imports_its_own(
    agents: tuple[Agent, Agent, Agent],
    bus: redis.Redis,
) -> None:
    _, _, shadow = agents
    pool = ready(shadow, 1)
    since = newest(bus)
    run(shadow, BASE + 10, ["python", "uses_numpy.py"])
    assert event(bus, "replica_started", BASE + 10, since)["pid"] not in pool
    assert event(bus, "replica_exited", BASE + 10, since)["exit_code"] == 0
    log = log_of(shadow, BASE + 10)
    assert "NUMPY the job" in log and "warm replica" not in log
    assert set(shadow.pool.ready_pids()) == pool  # not taken
