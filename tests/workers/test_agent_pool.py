"""Warm replica processes, for real (an agent as root, its pool of TensorFlow processes,
Redis, a local artifact store): a `trainer` replica handed to a warm process is the job's
own process exactly as a cold one is — its uid, environment, directory, session, log and
devices — and is stopped, killed and reported as one; each warm process serves one
replica and is replaced; `command` jobs other than `python SCRIPT` and `python -m MODULE`
(tests/workers/test_warm_commands.py) and jobs that set import-time variables start
cold; a pool whose processes fail turns itself off; idle processes end with their agent."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from cohort.bundles import pack
from services.settings import Settings
from services.storage.keys import bundle_key
from services.storage.store import open_store
from services.wire.keys import EVENTS_STREAM, attempt_key, claim_key
from services.wire.replica import DistributionOptions, ReplicaSpec, StartReplica, StopReplica
from tests.conftest import redis_url
from workers import layout
from workers.node.agent import Agent
from workers.node.environment import agent_marks
from workers.node.pool import MAX_FAILURES, ReplicaPool
from workers.process_priority import WARM_NICE, WARM_YIELD_SECONDS

JOB = 990_701
UID_BASE = 1_900_000_000
UID_RANGE = 1000
NODE = "pool"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="isolation needs an agent as root")

# The job's own code (a bundle): says what its process is, then returns, or runs until
# it is stopped.
PROBE = """import json, os, sys, tempfile, time

def train(ctx):
    import tensorflow as tf
    mask = os.umask(0)
    os.umask(mask)
    with open("/proc/self/environ", "rb") as handle:  # the environment it was exec'd with
        exec_env = [v.decode() for v in handle.read().split(b"\\0") if v]
    seen = {"pid": os.getpid(), "ppid": os.getppid(), "uid": os.getuid(),
            "euid": os.geteuid(), "gid": os.getgid(), "egid": os.getegid(),
            "groups": os.getgroups(), "umask": mask, "cwd": os.getcwd(),
            "env": dict(os.environ), "exec_env": exec_env, "tmp": tempfile.gettempdir(),
            "sid": os.getsid(0), "pgid": os.getpgid(0),
            "cpus": [d.name for d in tf.config.list_logical_devices("CPU")],
            "in_sync": ctx.strategy.num_replicas_in_sync,
            "preloaded": "sklearn.model_selection" in sys.modules}
    with open(os.path.join(ctx.work_dir, "seen.json"), "w") as handle:
        json.dump(seen, handle)
    while ctx.hyperparameters.get("block"):
        time.sleep(0.1)
    return {"done": 1.0}
"""


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module")
def bus() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url("agent"), decode_responses=True)
    client.delete(
        *(attempt_key(job) for job in range(JOB, JOB + 10)),
        *(claim_key(job, 1, 0) for job in range(JOB, JOB + 10)),
    )
    yield client
    client.close()


@contextlib.contextmanager
def running_agent(
    root: Path, bus: redis.Redis, node_id: str, pool_size: int, files: dict[str, str]
) -> Iterator[Agent]:
    """An agent as root with `pool_size` warm processes, its DATA_DIR under `root`, and a
    bundle of `files` in its store (`agent.bundle`); shut down after."""
    owned = "AGENT_ONLY_SECRET" not in os.environ  # two agents in one test process
    os.environ["AGENT_ONLY_SECRET"] = "hunter2"  # a replica must never see it
    root.mkdir(mode=0o711)
    agent = Agent(
        Settings(
            DATA_DIR=root / "data",
            NODE_ID=node_id,
            NODE_KEY="ab" * 32,
            ARTIFACT_URL=str(root / "store"),
            REPLICA_POOL_SIZE=pool_size,
            REPLICA_UID_BASE=UID_BASE,
            REPLICA_UID_RANGE=UID_RANGE,
            STOP_GRACE=2.0,
        ),
        bus,
    )
    agent.start_pool()
    try:
        tree = root / "code"
        for name, text in files.items():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / name).write_text(text)
        info = pack(tree, root / "code.tar.gz")
        open_store(settings=agent.settings).put_file(bundle_key(info.digest), root / "code.tar.gz")
        agent.bundle = info.digest  # type: ignore[attr-defined]
        yield agent
    finally:
        warm = agent.pool.waiting_pids()
        agent.shutdown(grace=2)
        if owned:
            del os.environ["AGENT_ONLY_SECRET"]
    assert not [pid for pid in warm if alive(pid)], "the agent's shutdown left warm processes"


@pytest.fixture(scope="module")
def node(replicas_tmp_root: Path, bus: redis.Redis) -> Iterator[Agent]:
    """One agent as root with two warm processes, shared by the module's tests."""
    with running_agent(replicas_tmp_root / "pool", bus, NODE, 2, {"probe.py": PROBE}) as agent:
        yield agent


def start(node: Agent, job_id: int, **spec: Any) -> StartReplica:
    fields: dict[str, Any] = {
        "bundle": node.bundle,
        "trainer": "probe:train",  # type: ignore[attr-defined]
        "strategy": "one_device",
        **spec,
    }
    return StartReplica(NODE, ReplicaSpec(job_id, 1, 0, 1, **fields))


def event(
    client: redis.Redis, kind: str, job_id: int, since: str, timeout: float = 120
) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        for _, entry in client.xrange(EVENTS_STREAM, min=f"({since}"):
            data = json.loads(entry["data"])
            if entry["kind"] == kind and data.get("job_id") == job_id:
                return data  # type: ignore[no-any-return]
        return None

    return wait_for(found, timeout, f"{kind} of job {job_id}")  # type: ignore[no-any-return]


def newest(client: redis.Redis) -> str:
    entries = client.xrevrange(EVENTS_STREAM, count=1)
    return str(entries[0][0]) if entries else "0-0"


def ready(node: Agent) -> set[int]:
    """The pool's two warm processes, once both are ready (minutes on a 2-core machine
    that other TensorFlow work keeps busy: each import takes ~5 CPU-seconds)."""
    return set(
        wait_for(
            lambda: len(pids := node.pool.ready_pids()) == 2 and pids, 600, "two warm processes"
        )
    )


def seen(node: Agent, job_id: int) -> dict[str, Any]:
    path = layout.work_dir(node.data_dir, job_id, 1, 0) / "seen.json"
    return json.loads(
        wait_for(lambda: path.is_file() and path.read_text(), 60, f"job {job_id}'s probe")
    )  # type: ignore[no-any-return]


def replica_log(node: Agent, job_id: int) -> str:
    return layout.log_file(node.data_dir, job_id, 1, 0).read_text()


def test_a_trainer_replica_is_handed_to_a_warm_process_as_its_jobs_own(
    node: Agent, bus: redis.Redis
) -> None:
    warm = ready(node)
    since = newest(bus)
    # Mirrored over two logical CPU devices: the split only applies to a TensorFlow
    # whose runtime has not started, so it shows the warm process left it untouched.
    node.start_replica(
        start(node, JOB, strategy="mirrored", distribution=DistributionOptions(cpu_devices=2))
    )
    pid = event(bus, "replica_started", JOB, since)["pid"]
    assert pid in warm
    assert event(bus, "replica_exited", JOB, since)["exit_code"] == 0, replica_log(node, JOB)
    got = seen(node, JOB)
    uid = UID_BASE + JOB % UID_RANGE
    assert got["pid"] == pid and got["ppid"] == os.getpid()
    assert (got["uid"], got["euid"], got["gid"], got["egid"]) == (uid, uid, uid, uid)
    assert got["groups"] == [] and got["umask"] == 0o077
    assert got["sid"] == got["pgid"] == pid  # its own session: one killpg stops it all
    work = layout.work_dir(node.data_dir, JOB, 1, 0)
    assert got["cwd"] == str(work / "code")
    assert got["env"]["HOME"] == str(work)
    assert got["tmp"] == str(layout.tmp_dir(node.data_dir, JOB))  # not the warm one's TMPDIR
    assert got["env"]["COHORT_JOB_ID"] == str(JOB) and got["env"]["CUDA_VISIBLE_DEVICES"] == ""
    assert "AGENT_ONLY_SECRET" not in got["env"]
    # The default preload (COHORT_REPLICA_POOL_PRELOAD) imported; the variable is the warm
    # process's, not the job's.
    assert got["preloaded"] and "COHORT_REPLICA_POOL_PRELOAD" not in got["env"]
    # What the agent's reaper and the parent watch read: the environment at exec.
    assert f"COHORT_NODE_ID={NODE}" in got["exec_env"]
    assert f"COHORT_AGENT_PID={os.getpid()}" in got["exec_env"]
    assert not [v for v in got["exec_env"] if v.startswith(("AGENT_ONLY_SECRET", "COHORT_JOB"))]
    assert got["in_sync"] == 2 and len(got["cpus"]) == 2
    log = replica_log(node, JOB)
    assert f"cohort: warm replica: process {pid} was ready" in log
    assert "num_replicas_in_sync=2" in log
    assert not alive(pid)

    # A replacement took its place; the next replica gets another process, never this one.
    replacements = ready(node)
    assert pid not in replacements
    since = newest(bus)
    node.start_replica(start(node, JOB + 1))
    second = event(bus, "replica_started", JOB + 1, since)["pid"]
    assert event(bus, "replica_exited", JOB + 1, since)["exit_code"] == 0
    assert second in replacements and second != pid
    assert seen(node, JOB + 1)["uid"] == UID_BASE + (JOB + 1) % UID_RANGE


def test_a_pooled_replica_stops_on_request(node: Agent, bus: redis.Redis) -> None:
    warm = ready(node)
    since = newest(bus)
    node.start_replica(start(node, JOB + 2, hyperparameters={"block": True}))
    pid = event(bus, "replica_started", JOB + 2, since)["pid"]
    assert pid in warm and seen(node, JOB + 2)["pid"] == pid
    # A grace long enough for a loaded machine: SIGKILL after it would say 137.
    node.stop_replica(StopReplica(NODE, JOB + 2, 1, 0, grace_seconds=60))
    assert event(bus, "replica_exited", JOB + 2, since)["exit_code"] == 143  # its SIGTERM
    assert not alive(pid)


def test_a_pooled_replica_killed_is_reported_and_its_leftovers_reaped(
    node: Agent, bus: redis.Redis
) -> None:
    warm = ready(node)
    since = newest(bus)
    node.start_replica(start(node, JOB + 3, hyperparameters={"block": True}))
    pid = event(bus, "replica_started", JOB + 3, since)["pid"]
    assert pid in warm and seen(node, JOB + 3)["pid"] == pid
    # Something the job left outside the replica's group, under its uid.
    uid = UID_BASE + (JOB + 3) % UID_RANGE
    leftover = subprocess.Popen(  # noqa: S603
        [sys.executable, "-c", "import time; time.sleep(300)"],
        start_new_session=True,
        env=agent_marks(NODE, node.data_dir),
        user=uid,
        group=uid,
        extra_groups=[],
    )
    # Another agent's replica on this host under the same node id and uid (a test stack
    # beside this one, with a DATA_DIR of its own): not this agent's to end.
    other = subprocess.Popen(  # noqa: S603
        [sys.executable, "-c", "import time; time.sleep(300)"],
        start_new_session=True,
        env=agent_marks(NODE, node.data_dir.parent / "another-stack"),
        user=uid,
        group=uid,
        extra_groups=[],
    )
    try:
        os.kill(pid, signal.SIGKILL)
        assert event(bus, "replica_exited", JOB + 3, since)["exit_code"] == 137
        assert leftover.wait(timeout=10) == -signal.SIGKILL  # reaped: the job's last process
        assert other.poll() is None, "another agent's replica was ended"
    finally:
        for process in (leftover, other):
            if process.poll() is None:
                process.kill()
                process.wait()


def test_other_commands_and_import_time_variables_start_cold(node: Agent, bus: redis.Redis) -> None:
    warm = ready(node)
    since = newest(bus)
    node.start_replica(
        StartReplica(
            NODE,
            ReplicaSpec(JOB + 4, 1, 0, 1, None, "one_device", command=["python", "-c", "pass"]),
        )
    )
    # TensorFlow reads its log level when it is imported: a warm process has, already;
    # so has scikit-learn (the default preload) its settings.
    node.start_replica(start(node, JOB + 5, env={"TF_CPP_MIN_LOG_LEVEL": "3"}))
    node.start_replica(start(node, JOB + 6, env={"SKLEARN_ASSUME_FINITE": "1"}))
    for job_id in (JOB + 4, JOB + 5, JOB + 6):
        assert event(bus, "replica_started", job_id, since)["pid"] not in warm
        assert event(bus, "replica_exited", job_id, since)["exit_code"] == 0
        assert "warm replica" not in replica_log(node, job_id)
    assert set(node.pool.ready_pids()) == warm  # none was taken
    assert not seen(node, JOB + 6)["preloaded"]  # a fresh interpreter's modules


def test_an_idle_warm_process_ends_with_its_channel(node: Agent) -> None:
    ready(node)
    warm = node.pool.take()
    assert warm is not None
    warm.channel.close()  # what the kernel does to the agent's end when the agent dies
    assert warm.popen.wait(timeout=30) == 0
    ready(node)  # replaced


def test_importing_tensorflow_leaves_devices_alone_and_the_check_sees_when_not() -> None:
    probe = """
from services.wire.replica import DistributionOptions
from workers.replica import distribution, pool_entry
pool_entry.warm_up()
assert pool_entry.devices_untouched()
import tensorflow as tf
tf.constant(1.0)  # starts the runtime
assert not pool_entry.devices_untouched()
try:
    distribution.configure_devices(DistributionOptions(cpu_devices=2))
except RuntimeError as exc:
    print("too late:", exc)
"""
    done = subprocess.run(
        [sys.executable, "-P", "-c", probe],
        capture_output=True,  # noqa: S603
        text=True,
        timeout=180,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert done.returncode == 0, done.stderr
    assert "too late:" in done.stdout


def test_a_pool_whose_processes_fail_turns_itself_off(tmp_path: Path) -> None:
    pool = ReplicaPool(2, "/bin/false", "failing", tmp_path)
    pool.start()
    try:
        wait_for(lambda: pool.off, 30, "the pool to turn itself off")
        # Nothing happens to wait for: three keeper ticks pass, and no process starts.
        time.sleep(3)
        assert pool.started == MAX_FAILURES
        assert pool.waiting_pids() == [] and pool.take() is None
    finally:
        pool.shutdown()


def test_a_preloaded_module_that_cannot_be_imported_is_skipped_and_said(tmp_path: Path) -> None:
    pool = ReplicaPool(1, sys.executable, "preload", tmp_path, preload=["cohort_no_such", "json"])
    pool.start()
    try:
        wait_for(pool.ready_pids, 600, "a warm process")
        log = pool.dirs.log_file.read_text()
        assert "cohort: not preloaded: cohort_no_such: ModuleNotFoundError" in log, log
        assert "not preloaded: json" not in log
    finally:
        pool.shutdown()


def autogroup_nice(pid: int) -> int | None:
    """The nice value of process `pid`'s autogroup (its session's), as /proc shows it."""
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def test_a_warm_process_yields_at_first_then_runs_at_normal_priority_on_a_busy_machine(
    tmp_path: Path,
) -> None:
    # Busy loops, each a session (an autogroup) of its own, leave a process at nice 19 a
    # sliver of a core. Importing TensorFlow holds the GIL for seconds of CPU: a timer of
    # the warm process's own, meant to raise it after its first seconds, ran only once the
    # import was done, minutes later on a busy machine (a pool never full in 600 s).
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(4)
    ]
    pool = ReplicaPool(1, sys.executable, "yield", tmp_path)
    try:
        pool.start()
        pid = wait_for(pool.waiting_pids, 30, "a warm process")[0]
        born = psutil.Process(pid).create_time()
        wait_for(lambda: autogroup_nice(pid) == WARM_NICE, WARM_YIELD_SECONDS, "its low priority")
        wait_for(lambda: autogroup_nice(pid) == 0, WARM_YIELD_SECONDS + 10, "its normal priority")
        assert time.time() - born >= WARM_YIELD_SECONDS, "raised before its yield was over"
        assert os.getpriority(os.PRIO_PROCESS, pid) == 0  # its main thread's own nice
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        pool.shutdown()


def test_pool_size_0_keeps_no_process(tmp_path: Path) -> None:
    pool = ReplicaPool(0, sys.executable, "off", tmp_path)
    pool.start()
    assert pool.off and pool.waiting_pids() == [] and pool.take() is None
    assert not layout.pool_dirs(tmp_path).root.exists()
