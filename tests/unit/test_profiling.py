"""The step range a replica profiles (workers/replica/profiling.py) and the context's
distribution helpers that need no TensorFlow, with a fake `tensorflow.profiler`."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from services.wire.replica import DistributionOptions, Profile
from workers.replica.profiling import StepProfiler
from workers.replica.trainers import TrainerContext


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the profiler was asked to do, through a fake `tensorflow` module."""
    seen: list[str] = []

    class Trace:
        def __init__(self, name: str, step_num: int, _r: int) -> None:
            self.step = step_num

        def __enter__(self) -> None:
            seen.append(f"trace {self.step}")

        def __exit__(self, *exc: object) -> None:
            return None

    experimental = types.SimpleNamespace(
        start=lambda logdir: seen.append(f"start {Path(logdir).name}"),
        stop=lambda: seen.append("stop"),
        Trace=Trace,
    )
    fake = types.ModuleType("tensorflow")
    fake.profiler = types.SimpleNamespace(experimental=experimental)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tensorflow", fake)
    return seen


def run_steps(profiler: StepProfiler, steps: range) -> None:
    for step in steps:
        profiler.begin(step)
        profiler.end(step)


def test_profiles_exactly_the_requested_range(calls: list[str], tmp_path: Path) -> None:
    profiler = StepProfiler(Profile(first_step=3, last_step=5), tmp_path / "tb")
    seen_at: dict[int, list[str]] = {}
    for step in range(1, 9):
        profiler.begin(step)
        seen_at[step] = list(calls)
        profiler.end(step)
    assert seen_at[2] == [] and seen_at[3] == ["start tb"]
    assert calls == ["start tb", "stop"]
    assert seen_at[6] == ["start tb", "stop"]  # stopped after step 5, never again
    profiler.close()
    assert calls == ["start tb", "stop"]


def test_a_run_ending_inside_the_range_still_writes_it(calls: list[str], tmp_path: Path) -> None:
    profiler = StepProfiler(Profile(first_step=2, last_step=50), tmp_path / "tb")
    run_steps(profiler, range(1, 5))
    assert calls == ["start tb"]
    profiler.close()
    assert calls == ["start tb", "stop"]


def test_a_run_resumed_inside_the_range_profiles_the_rest(calls: list[str], tmp_path: Path) -> None:
    profiler = StepProfiler(Profile(first_step=2, last_step=4), tmp_path / "tb")
    run_steps(profiler, range(3, 8))
    assert calls == ["start tb", "stop"]


def test_custom_loop_steps_are_traced_only_while_profiling(
    calls: list[str], tmp_path: Path
) -> None:
    profiler = StepProfiler(Profile(first_step=2, last_step=3), tmp_path / "tb")
    for step in range(1, 5):
        with profiler.step(step):
            pass
    assert calls == ["start tb", "trace 2", "trace 3", "stop"]


def test_no_profile_never_touches_the_profiler(calls: list[str], tmp_path: Path) -> None:
    profiler = StepProfiler(None, tmp_path)
    run_steps(profiler, range(1, 100))
    profiler.close()
    assert calls == []


def test_a_profiler_that_fails_to_start_does_not_fail_training(
    calls: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(_logdir: str) -> None:
        raise RuntimeError("another profiler is running")

    monkeypatch.setattr(sys.modules["tensorflow"].profiler.experimental, "start", refuse)
    profiler = StepProfiler(Profile(first_step=1, last_step=2), tmp_path)
    run_steps(profiler, range(1, 4))
    profiler.close()
    assert calls == []


def context(tmp_path: Path, **fields: Any) -> TrainerContext:
    return TrainerContext(
        strategy=None,
        job_id=1,
        attempt=1,
        index=0,
        replicas=1,
        hyperparameters={},
        job_dir=tmp_path,
        reporter=None,  # type: ignore[arg-type]
        work_dir=tmp_path,
        checkpoint_dir=tmp_path,
        model_dir=tmp_path,
        tensorboard_dir=tmp_path / "tb",
        input_dir=tmp_path,
        **fields,
    )


def test_the_context_carries_the_options_and_one_profiler(tmp_path: Path) -> None:
    plain = context(tmp_path)
    assert plain.distribution == DistributionOptions() and plain.accumulation_steps == 1
    assert plain.profile is None and plain.profiler.done
    ctx = context(
        tmp_path,
        distribution=DistributionOptions(gradient_accumulation_steps=4),
        profile=Profile(first_step=5, last_step=6),
    )
    assert ctx.accumulation_steps == 4
    assert ctx.profiler.profile == ctx.profile and ctx.profiler.logdir == tmp_path / "tb"
