"""A replica given GPUs that TensorFlow cannot see stops at once (workers/replica)."""

from __future__ import annotations

import pytest

from services.exit_codes import is_retryable
from workers.replica.devices_check import EXIT_NO_GPU, given_gpus, require_given_gpus


def test_given_gpus_reads_cuda_visible_devices() -> None:
    assert given_gpus({}) == []
    assert given_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert given_gpus({"CUDA_VISIBLE_DEVICES": "2, 0"}) == ["2", "0"]


def test_no_gpu_given_never_asks_tensorflow() -> None:
    def boom() -> list[object]:
        raise AssertionError("asked TensorFlow")

    require_given_gpus({"CUDA_VISIBLE_DEVICES": ""}, boom)


def test_every_given_gpu_seen_runs() -> None:
    require_given_gpus({"CUDA_VISIBLE_DEVICES": "1,3"}, lambda: ["gpu0", "gpu1"])


def test_a_gpu_missing_fails_with_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        require_given_gpus({"CUDA_VISIBLE_DEVICES": "1,3"}, lambda: ["gpu0"])
    assert stopped.value.code == EXIT_NO_GPU
    line = capsys.readouterr().err
    assert "given GPU 1,3 but TensorFlow sees 1 of 2" in line
    assert "not training on the CPU" in line
    # Another attempt on the same node would fail the same way.
    assert not is_retryable(EXIT_NO_GPU)
