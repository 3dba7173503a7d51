"""mirrored and multi_worker_mirrored with their communication choices, for real.

One process over two logical CPU devices (`distribution.cpu_devices: 2`) trains the
digits MLP to the accuracy of a two-process multi_worker_mirrored gang on the same
data and global batch; the gang runs with `communication: auto` and `ring`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.workers import test_runner_local as local
from tests.workers.test_runner_local import (
    Reports,
    gang_envs,
    logs_of,
    read_points,
    replica_env,
    run_replicas,
    spec,
)

# The runner tests' fixtures: what the runners reported, spec files in tmp_path.
reports = local.reports
spec_dir = local.spec_dir

# Both ways see the whole training split at a global batch of 64 for 100 steps.
BAND = 0.05  # how far apart the two held-out accuracies may be


def mirrored_env(job_id: int, job_dir: Path, distribution: dict[str, Any]) -> dict[str, str]:
    return replica_env(spec(job_id, job_dir, strategy="mirrored", distribution=distribution))


def eval_accuracy(reports: Reports, job_id: int) -> float:
    """The chief's held-out accuracy at the final step."""
    final = {
        (replica, step): value
        for replica, step, _, name, value, _ in read_points(reports, job_id)
        if name == "eval_accuracy"
    }
    assert final[(0, 100)] > 0, final
    return final[(0, 100)]


def run_gang(reports: Reports, tmp_path: Path, job_id: int, communication: str) -> float:
    logs = tmp_path / f"logs-{communication}"
    assert run_replicas(
        gang_envs(
            job_id, tmp_path / f"job-{job_id}", distribution={"communication": communication}
        ),
        logs,
    ) == [
        0,
        0,
    ], logs_of(logs)
    for index in (0, 1):
        assert (
            f"cohort: multi_worker_mirrored communication={communication.upper()}"
            in (logs / f"replica-{index}.out").read_text()
        )
    return eval_accuracy(reports, job_id)


def test_mirrored_over_two_cpu_devices_matches_a_two_worker_gang(
    reports: Reports, tmp_path: Path
) -> None:
    logs = tmp_path / "logs-mirrored"
    env = mirrored_env(301, tmp_path / "job-301", {"cpu_devices": 2})
    assert run_replicas([env], logs) == [0], logs_of(logs)
    out = (logs / "replica-0.out").read_text()
    assert (
        "cohort: mirrored devices=['/device:CPU:0', '/device:CPU:1'] "
        "cross_device_ops=ReductionToOneDevice" in out
    ), out
    assert "cohort: strategy=mirrored num_replicas_in_sync=2 role=worker" in out
    mirrored = eval_accuracy(reports, 301)

    gang = run_gang(reports, tmp_path, 302, "auto")
    assert mirrored >= 0.85 and gang >= 0.85, (mirrored, gang)
    assert abs(mirrored - gang) <= BAND, (mirrored, gang)


def test_a_ring_gang_trains_like_the_others(reports: Reports, tmp_path: Path) -> None:
    assert run_gang(reports, tmp_path, 303, "ring") >= 0.85


def test_ring_under_mirrored_is_a_configuration_error(tmp_path: Path) -> None:
    # The API refuses it (ring is a collective of workers); a runner handed it
    # anyway says so and exits 2.
    logs = tmp_path / "logs"
    env = mirrored_env(304, tmp_path / "job", {"communication": "ring"})
    assert run_replicas([env], logs, timeout=60) == [2], logs_of(logs)
    assert "communication 'ring' is not one of mirrored's" in (logs / "replica-0.err").read_text()
