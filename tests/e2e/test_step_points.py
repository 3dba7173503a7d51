"""End to end: a fast `trainer` job on a node that samples per-step points (the product's
default, COHORT_STEP_POINTS_PER_SECOND=10; the suite turns it off elsewhere): every step
of the first second, then the multiples of one power-of-two stride, each epoch's last
step; the progress, the charts' series and the scaling report read from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import job_story, pg_stack_with, wait_terminal

EPOCHS, STEPS_PER_EPOCH = 3, 500
TOTAL = EPOCHS * STEPS_PER_EPOCH


@pytest.mark.e2e
def test_a_fast_trainer_ships_a_sample_of_its_steps_that_stands_for_all_of_them(
    tmp_path: Path,
) -> None:
    with pg_stack_with(tmp_path, {"COHORT_STEP_POINTS_PER_SECOND": "10"}) as (_stack, client):
        job = client.submit(
            {
                "name": "sampled",
                "trainer": "mlp_digits",
                "replicas": 1,
                "hyperparameters": {"epochs": EPOCHS, "steps_per_epoch": STEPS_PER_EPOCH},
            }
        )
        assert wait_terminal(client, job["id"])["status"] == "succeeded", job_story(
            client, job["id"]
        )
        job = client.job(job["id"])  # settled: its report reads every point stored
        points = client.metrics(job["id"], limit=100_000)

    series = {
        name: sorted(p["step"] for p in points if p["name"] == name)
        for name in ("loss", "step_time", "examples_per_sec")
    }
    steps = series["loss"]
    assert series["step_time"] == series["examples_per_sec"] == steps
    epoch_ends = {STEPS_PER_EPOCH * (e + 1) for e in range(EPOCHS)}
    assert steps[0] == 1 and epoch_ends <= set(steps), steps
    # At no pace this machine trains the MLP (well under 1,000 steps a second) do the
    # first second's steps and one in `stride` after it reach half the steps.
    assert len(steps) < TOTAL / 2, len(steps)
    window = next(n for n, step in enumerate(steps) if step != n + 1)  # steps 1..window
    later = [step for step in steps[window:] if step not in epoch_ends]
    stride = 1 << min((step & -step).bit_length() - 1 for step in later)
    assert stride >= 2, later  # every later step a multiple of it
    within_epochs = [
        (a, b)
        for a, b in zip(later, later[1:], strict=False)
        if a // STEPS_PER_EPOCH == b // STEPS_PER_EPOCH
    ]
    assert all(b - a == stride for a, b in within_epochs), later

    # Each point's step time is the mean of the steps it stands for: the scaling report's
    # throughput over them agrees with the examples over the seconds the steps took.
    times = {p["step"]: p["ts"] for p in points if p["name"] == "step_time"}
    measured = 32 * (TOTAL - 1) / (times[TOTAL] - times[1])
    reported = job["scaling"]["per_replica_examples_per_second"]
    assert 0.7 * measured < reported < 1.3 * measured, (reported, measured)
    assert job["progress"]["step"] == TOTAL
