"""The replica runner for real: `python -m workers.replica.runner` processes, reporting in
their metrics files (a replica holds no Redis credentials; its agent ships the file).

Covers a 2-worker MultiWorkerMirroredStrategy gang on loopback ports, a 1-replica
OneDeviceStrategy run, configuration errors (exit code 2), and the agent's metric
reporter's batching and failure handling (with a fake Redis client).
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cohort.metrics import decode_line
from services.wire.keys import METRICS_STREAM
from tests.replica_runs import reported, runner_env, start_runner, worker_configs
from workers.node.replay import CHECK_EVERY
from workers.node.report_shipper import MetricReporter

GANG_TIMEOUT = 120.0


_spec_dir: list[Path] = []  # the running test's tmp_path


@pytest.fixture(autouse=True)
def spec_dir(tmp_path: Path) -> Iterator[None]:
    """Spec files go in the test's own tmp_path."""
    _spec_dir.append(tmp_path)
    yield
    _spec_dir.pop()


def write_spec(raw: str) -> Path:
    """A spec file as the agent writes one (COHORT_REPLICA_SPEC names it)."""
    directory = Path(tempfile.mkdtemp(prefix="spec-", dir=_spec_dir[-1]))
    path = directory / "spec.json"
    path.write_text(raw)
    return path


def replica_env(
    spec: dict[str, Any] | None, tf_config: dict[str, Any] | None = None
) -> dict[str, str]:
    """The environment the node agent gives a replica (its metrics file next to its spec)."""
    return runner_env(write_spec(json.dumps(spec)) if spec is not None else None, tf_config)


def spec(job_id: int, directory: Path, **overrides: Any) -> dict[str, Any]:
    """The spec file of a 1-replica mlp_digits job (a ReplicaLaunch), with overrides of
    the spec's fields or of `job_dir`."""
    replica = {
        "job_id": job_id,
        "attempt": 1,
        "index": 0,
        "replicas": 1,
        "trainer": "mlp_digits",
        "strategy": "one_device",
        "hyperparameters": {},
    }
    job_dir = overrides.pop("job_dir", str(directory))
    return {"spec": {**replica, **overrides}, "job_dir": job_dir}


def start_replicas(envs: list[dict[str, str]], logs: Path) -> list[subprocess.Popen[bytes]]:
    """Start one runner per env, its stdout and stderr in files under `logs`."""
    logs.mkdir(parents=True, exist_ok=True)
    processes = []
    for index, env in enumerate(envs):
        with (
            open(logs / f"replica-{index}.out", "wb") as out,
            open(logs / f"replica-{index}.err", "wb") as err,
        ):
            processes.append(start_runner(env, out, err))
    return processes


def wait_replicas(
    processes: list[subprocess.Popen[bytes]], logs: Path, timeout: float = GANG_TIMEOUT
) -> list[int]:
    """Exit codes of all processes; kills them all and fails if one outlives `timeout`."""
    deadline = time.monotonic() + timeout
    try:
        return [p.wait(timeout=max(0.1, deadline - time.monotonic())) for p in processes]
    except subprocess.TimeoutExpired:
        pytest.fail(f"replicas still running after {timeout:.0f}s\n{logs_of(logs)}")
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()


def run_replicas(
    envs: list[dict[str, str]], logs: Path, timeout: float = GANG_TIMEOUT
) -> list[int]:
    """Start one runner per env and wait for all; returns their exit codes."""
    return wait_replicas(start_replicas(envs, logs), logs, timeout)


def logs_of(logs: Path) -> str:
    """All replica output, for assertion messages."""
    return "\n".join(
        f"--- {path.name}\n{path.read_text()[-3000:]}" for path in sorted(logs.iterdir())
    )


class Reports:
    """What the runners a test started reported: the metrics file beside each spec file
    under `root` (what their agent would ship), read as the agent reads it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def points(self, job_id: int) -> list[tuple[int, int, int, int | None, str, float, float]]:
        """(attempt, replica, step, epoch, name, value, ts) of every point of `job_id`."""
        points = []
        for spec_file in sorted(self.root.glob("spec-*/spec.json")):
            try:
                replica = json.loads(spec_file.read_text())["spec"]
            except (ValueError, KeyError, TypeError):
                continue  # a malformed spec a test wrote on purpose
            path = spec_file.parent / "metrics.jsonl"
            if replica.get("job_id") != job_id or not path.exists():
                continue
            for step, name, value, ts, epoch in reported(path):
                assert isinstance(step, int) and isinstance(value, float)
                points.append((replica["attempt"], replica["index"], step, epoch, name, value, ts))
        return points


@pytest.fixture
def reports(tmp_path: Path) -> Reports:
    """The reports of the runners this test starts (their spec files go in tmp_path)."""
    return Reports(tmp_path)


def read_points(
    reports: Reports, job_id: int
) -> list[tuple[int, int, int | None, str, float, float]]:
    """(replica, step, epoch, name, value, ts) of every point of `job_id`, attempt 1."""
    return [point[1:] for point in reports.points(job_id) if point[0] == 1]


def gang_envs(
    job_id: int, job_dir: Path, workers: int = 2, **overrides: Any
) -> list[dict[str, str]]:
    """Environments of a multi_worker_mirrored gang on free loopback ports, with
    overrides of the spec's fields (`spec`)."""
    return [
        replica_env(
            spec(
                job_id,
                job_dir,
                index=index,
                replicas=workers,
                strategy="multi_worker_mirrored",
                **overrides,
            ),
            tf_config,
        )
        for index, tf_config in enumerate(worker_configs(workers))
    ]


def test_two_worker_gang_trains_reports_and_saves(reports: Reports, tmp_path: Path) -> None:
    job_id, job_dir = 101, tmp_path / "job"
    envs = gang_envs(job_id, job_dir)
    started = time.monotonic()
    codes = run_replicas(envs, tmp_path / "logs")
    elapsed = time.monotonic() - started
    assert codes == [0, 0], logs_of(tmp_path / "logs")
    print(f"2-replica gang finished in {elapsed:.1f}s")  # noqa: T201 - visible with -s

    out = (tmp_path / "logs" / "replica-1.out").read_text()
    assert f"cohort: replica job={job_id} attempt=1 index=1 TF_CONFIG={envs[1]['TF_CONFIG']}" in out
    assert "cohort: strategy=multi_worker_mirrored num_replicas_in_sync=2" in out
    assert "cohort: first_step ts=" in out

    points = read_points(reports, job_id)
    assert {replica for replica, *_ in points} == {0, 1}
    # Epochs travel too: the per-step points carry theirs (0..4), the final ones none.
    assert {epoch for _, _, epoch, name, _, _ in points if name == "loss"} == set(range(5))
    keys = collections.Counter((replica, step, name) for replica, step, _, name, _, _ in points)
    assert [key for key, count in keys.items() if count > 1] == []

    for replica in (0, 1):
        mine = [p for p in points if p[0] == replica]
        loss = sorted((step, value) for _, step, _, name, value, _ in mine if name == "loss")
        assert [step for step, _ in loss] == list(range(1, 101))  # 5 epochs x 20 steps
        first, last = (sum(v for _, v in part) / 5 for part in (loss[:5], loss[-5:]))
        assert last < first, (first, last)
        names = {name for _, _, _, name, _, _ in mine}
        assert {
            "accuracy",
            "step_time",
            "examples_per_sec",
            "epoch_loss",
            "epoch_accuracy",
        } <= names
        final = {
            name: (step, epoch, value)
            for _, step, epoch, name, value, _ in mine
            if name.startswith("eval_")
        }
        assert final["eval_accuracy"][:2] == (100, None)
        assert final["eval_accuracy"][2] >= 0.85, final
        assert final["eval_loss"][2] > 0

    # Both workers evaluated the same full held-out split.
    evals = {(p[0], p[3]): p[4] for p in points if p[3].startswith("eval_")}
    assert evals[(0, "eval_accuracy")] == pytest.approx(evals[(1, "eval_accuracy")])
    assert (job_dir / "model" / "saved_model.pb").is_file()
    assert not (job_dir / "tmp" / "worker-1").exists()


def test_sigterm_stops_a_training_gang_with_143(reports: Reports, tmp_path: Path) -> None:
    # TensorFlow's coordination service replaces the SIGTERM handler of a
    # multi-worker process with one that does not exit; the runner must win.
    job_id, logs = 104, tmp_path / "logs"
    envs = gang_envs(
        job_id, tmp_path / "job", hyperparameters={"epochs": 1, "steps_per_epoch": 100_000}
    )
    processes = start_replicas(envs, logs)
    deadline = time.monotonic() + GANG_TIMEOUT
    while not all("first_step" in (logs / f"replica-{i}.out").read_text() for i in range(2)):
        if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
            for process in processes:
                process.kill()
                process.wait()
            pytest.fail(f"the gang did not start training\n{logs_of(logs)}")
        time.sleep(0.1)
    time.sleep(0.5)
    for process in processes:
        process.terminate()
    assert wait_replicas(processes, logs, timeout=20) == [143, 143], logs_of(logs)
    # Both reported while training (the reporter does not wait for the end).
    assert {replica for replica, *_ in read_points(reports, job_id)} == {0, 1}


def test_checkpoint_requests_that_keep_coming_leave_the_exit_code_75(tmp_path: Path) -> None:
    """SIGUSR1 after SIGUSR1 (an operator's drain and the node's own shutdown notice both
    ask; a request can also reach a replica that has just finished): the replica saves once
    and exits 75 (CHECKPOINTED), never dies of a later request (138). Python's shutdown
    puts back the default action, ending the process, for every signal it had a handler
    for; the requests here keep coming until the process is gone, so one lands in that
    window unless the runner ignores them once its work is done."""
    job_id, job_dir, logs = 106, tmp_path / "job", tmp_path / "logs"
    hp = {"epochs": 1, "steps_per_epoch": 100_000}
    [process] = start_replicas([replica_env(spec(job_id, job_dir, hyperparameters=hp))], logs)
    deadline = time.monotonic() + GANG_TIMEOUT
    while "first_step" not in (logs / "replica-0.out").read_text():
        if time.monotonic() > deadline or process.poll() is not None:
            break
        time.sleep(0.05)
    signals = 0
    while process.poll() is None and time.monotonic() < deadline:
        process.send_signal(signal.SIGUSR1)
        signals += 1
        time.sleep(0.002)
    assert wait_replicas([process], logs, timeout=30) == [75], logs_of(logs)
    assert signals > 1, logs_of(logs)
    assert "on request; exiting 75" in (logs / "replica-0.out").read_text()


def test_one_device_without_tf_config(reports: Reports, tmp_path: Path) -> None:
    job_id, job_dir = 102, tmp_path / "job"
    hp = {"epochs": 1, "steps_per_epoch": 5}
    envs = [replica_env(spec(job_id, job_dir, hyperparameters=hp))]
    codes = run_replicas(envs, tmp_path / "logs")
    assert codes == [0], logs_of(tmp_path / "logs")
    assert "TF_CONFIG=none" in (tmp_path / "logs" / "replica-0.out").read_text()
    # The runner beat its progress in the file too (no Redis: the agent ships both).
    beats = [
        decode_line(raw).beat
        for raw in Path(envs[0]["COHORT_METRICS_FILE"]).read_bytes().splitlines()
    ]
    assert [beat for beat in beats if beat is not None], "no progress beat written"
    names = {(step, name) for _, step, _, name, _, _ in read_points(reports, job_id)}
    assert (5, "loss") in names and (5, "eval_accuracy") in names
    assert (job_dir / "model").is_dir()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"trainer": "no_such_trainer"}, "no_such_trainer"),
        ({"trainer": "no_such_module_xyz:train"}, "no_such_module_xyz:train"),
        ({"strategy": "data_parallel"}, "strategy"),
        ({"index": 2, "replicas": 2}, "index"),
        ({"job_dir": "relative/dir"}, "job_dir"),
    ],
)
def test_bad_replica_config_exits_2(
    tmp_path: Path, overrides: dict[str, Any], expected: str
) -> None:
    env = replica_env(spec(103, tmp_path / "job", **overrides))
    codes = run_replicas([env], tmp_path / "logs", timeout=60)
    err = (tmp_path / "logs" / "replica-0.err").read_text()
    assert codes == [2], logs_of(tmp_path / "logs")
    assert expected in err


@pytest.mark.parametrize("raw", [None, "", "{not json", "[]", '{"job_id": 1}'])
def test_missing_or_malformed_replica_spec_exits_2(tmp_path: Path, raw: str | None) -> None:
    env = replica_env(None)
    if raw is not None:
        env["COHORT_REPLICA_SPEC"] = str(write_spec(raw))
    codes = run_replicas([env], tmp_path / "logs", timeout=30)
    assert codes == [2]
    assert "cohort: bad replica configuration" in (tmp_path / "logs" / "replica-0.err").read_text()


def test_a_runner_without_its_metrics_file_exits_2(tmp_path: Path) -> None:
    env = replica_env(spec(105, tmp_path / "job"))
    del env["COHORT_METRICS_FILE"]
    codes = run_replicas([env], tmp_path / "logs", timeout=30)
    assert codes == [2]
    assert "COHORT_METRICS_FILE is not set" in (tmp_path / "logs" / "replica-0.err").read_text()


class FakeRedis:
    """Records XADDs; the first `failures` calls raise ConnectionError."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.entries: list[dict[str, Any]] = []
        self.calls = 0
        self.keys: dict[str, str] = {}  # the generation marker

    def xadd(self, name: str, fields: dict[str, str], *, maxlen: int, approximate: bool) -> str:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise redis.ConnectionError("down")
        assert (name, maxlen, approximate) == (METRICS_STREAM, 1_000_000, True)
        self.entries.append(json.loads(fields["data"]))
        return "0-1"

    def pipeline(self, transaction: bool) -> FakePipeline:
        assert transaction  # the generation marker's SET NX + GET (MULTI)
        return FakePipeline(self.keys)


class FakePipeline:
    """SET NX and GET, queued then executed, over FakeRedis' keys."""

    def __init__(self, keys: dict[str, str]) -> None:
        self.keys = keys
        self.queued: list[Any] = []

    def set(self, name: str, value: str, *, nx: bool) -> None:
        assert nx
        self.queued.append(lambda: self.keys.setdefault(name, value) == value)

    def get(self, name: str) -> None:
        self.queued.append(lambda: self.keys.get(name))

    def execute(self) -> list[Any]:
        return [command() for command in self.queued]


def points_of(client: FakeRedis) -> list[list[Any]]:
    return [point for entry in client.entries for point in entry["points"]]


def test_reporter_batches_by_size_and_time() -> None:
    client = FakeRedis()
    reporter = MetricReporter(
        client, job_id=7, attempt=2, replica=1, flush_interval=3600, flush_points=10
    )
    for step in range(1, 10):
        reporter.add(step, 0, "loss", 1.0 / step, ts=1000.0 + step)
        reporter.maybe_flush()
    assert client.calls == 0  # 9 points: neither size nor time says flush
    reporter.add(10, 0, "loss", 0.1)
    reporter.maybe_flush()
    assert client.calls == 1
    assert client.entries[0]["job_id"] == 7 and client.entries[0]["attempt"] == 2
    assert client.entries[0]["replica"] == 1
    assert client.entries[0]["points"][0] == [1, 0, "loss", 1.0, 1001.0]

    timed = MetricReporter(FakeRedis(), job_id=7, attempt=1, replica=0, flush_interval=0.0)
    timed.add(1, 0, "loss", 1.0)
    assert timed.due()


def test_reporter_keeps_points_while_redis_is_down() -> None:
    client = FakeRedis(failures=3)  # one whole flush (3 attempts) fails
    reporter = MetricReporter(client, job_id=7, attempt=1, replica=0)
    reporter.add(1, 0, "loss", 2.0)
    reporter.add(1, 0, "accuracy", float("nan"))  # not JSON; skipped with a warning
    assert reporter.flush() is False
    assert reporter.pending == 1
    assert not reporter.due()  # time-triggered flushes back off after a failure
    reporter.add(2, 0, "loss", 1.0)
    assert reporter.report_final({"eval_accuracy": 0.9}) is True
    assert [p[:4] for p in points_of(client)] == [
        [1, 0, "loss", 2.0],
        [2, 0, "loss", 1.0],
        [2, None, "eval_accuracy", 0.9],
    ]
    assert reporter.pending == 0


def test_reporter_caps_its_buffer() -> None:
    reporter = MetricReporter(
        FakeRedis(failures=10**6), job_id=7, attempt=1, replica=0, max_buffer=100
    )
    for step in range(1, 251):
        reporter.add(step, 0, "loss", 1.0)
    assert reporter.pending <= 100
    assert reporter.dropped == 250 - reporter.pending


def test_reporter_replays_recent_points_after_a_redis_restart() -> None:
    client = FakeRedis()
    reporter = MetricReporter(client, job_id=7, attempt=1, replica=0, flush_interval=3600)
    reporter.add(1, 0, "loss", 1.0, 10.0)
    assert reporter.flush()
    client.keys.clear()  # FLUSHALL (run_id unchanged): what Redis had is gone
    reporter.add(2, 0, "loss", 0.5, 11.0)
    assert reporter.flush()
    # A running replica's sender looks for a wipe at most every CHECK_EVERY seconds
    # (tests/unit/test_recently_sent.py): the flush after that finds it.
    time.sleep(CHECK_EVERY)
    reporter.add(3, 0, "loss", 0.25, 12.0)
    assert reporter.flush()
    steps = [point[0] for point in points_of(client)]
    assert steps.count(1) == 2  # step 1 sent again after the restart
    assert steps.count(2) >= 1 and steps.count(3) >= 1  # again too: stored once (SQL keys)
