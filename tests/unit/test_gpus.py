"""GPU discovery logic, with fake NVML and nvidia-smi (this machine has no GPU)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from workers.node import gpus
from workers.node.gpus import Gpu, discover_gpus, node_gpu_ids, parse_nvidia_smi, select_visible

FOUR = [Gpu(0, "GPU-aaaa1111"), Gpu(1, "GPU-bbbb2222"), Gpu(2, "GPU-cccc3333"),
        Gpu(3, "GPU-dddd4444")]


def test_parse_nvidia_smi_csv() -> None:
    out = "0, GPU-aaaa1111\n1, GPU-bbbb2222\n\nNo devices were found\n"
    assert parse_nvidia_smi(out) == FOUR[:2]


@pytest.mark.parametrize(("visible", "expected"), [
    (None, [0, 1, 2, 3]),
    ("", []),
    ("2,0", [2, 0]),
    ("1, 3", [1, 3]),
    ("GPU-cccc3333,0", [2, 0]),
    ("cccc", [2]),  # a UUID prefix without "GPU-"
    ("1,7,2", [1]),  # CUDA stops at the first invalid entry
    ("-1", []),
    ("0,0", [0]),  # a repeated device is invalid from there on
    ("GPU-", []),  # ambiguous prefix names no single GPU
])
def test_cuda_visible_devices_is_honoured(visible: str | None, expected: list[int]) -> None:
    assert select_visible(FOUR, visible) == expected


def test_nvml_first_then_nvidia_smi_then_none() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "1,0"}
    assert discover_gpus(env, nvml=lambda: FOUR, smi=lambda: []) == [1, 0]
    assert discover_gpus(env, nvml=lambda: None, smi=lambda: FOUR[:2]) == [1, 0]
    assert discover_gpus({}, nvml=lambda: None, smi=lambda: None) == []


def test_nvidia_smi_runs_the_query_and_fails_soft(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    seen: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout="0, GPU-aaaa1111\n", stderr="")

    assert gpus.from_nvidia_smi(run) == FOUR[:1]
    assert seen == [["/usr/bin/nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"]]

    def failing(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 9, stdout="", stderr="driver mismatch")

    assert gpus.from_nvidia_smi(failing) is None


def test_nothing_found_on_this_machine_without_gpus() -> None:
    # The real NVML (nvidia-ml-py is installed) answers "no driver" here, not an error.
    assert gpus.from_nvml() in (None, [])


def test_configured_count_caps_or_names_gpus() -> None:
    assert node_gpu_ids(0, [2, 3]) == [2, 3]
    assert node_gpu_ids(1, [2, 3]) == [2]
    assert node_gpu_ids(2, []) == [0, 1]
