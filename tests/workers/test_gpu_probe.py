"""The agent's GPU probe against the real TensorFlow of this machine (a process of its own)."""

from __future__ import annotations

import sys

from workers.node import gpus


def test_the_real_tensorflow_here_sees_no_gpu() -> None:
    # This machine's TensorFlow (tensorflow-cpu, no CUDA libraries): what a CPU-only
    # node's agent finds out before offering the GPUs NVML would report.
    assert gpus.tensorflow_gpu_count(sys.executable, [0]) == (0, "")


def test_an_interpreter_without_tensorflow_cannot_be_asked() -> None:
    count, why = gpus.tensorflow_gpu_count(sys.executable + "-missing", [0])
    assert count is None and "could not run" in why
