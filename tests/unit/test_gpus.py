"""GPU discovery logic, with fake NVML and nvidia-smi (this machine has no GPU)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from workers.node import gpus
from workers.node.gpus import Gpu, discover, node_gpu_ids, parse_nvidia_smi, select_visible

FOUR = [
    Gpu(0, "GPU-aaaa1111"),
    Gpu(1, "GPU-bbbb2222"),
    Gpu(2, "GPU-cccc3333"),
    Gpu(3, "GPU-dddd4444"),
]


def test_parse_nvidia_smi_csv() -> None:
    out = "0, GPU-aaaa1111\n1, GPU-bbbb2222\n\nNo devices were found\n"
    assert parse_nvidia_smi(out) == FOUR[:2]


def test_parse_nvidia_smi_reads_model_and_memory() -> None:
    out = (
        "0, GPU-aaaa1111, 40960, NVIDIA A100-SXM4-40GB\n1, GPU-bbbb2222, [N/A], Tesla T4, rev. B\n"
    )
    assert parse_nvidia_smi(out) == [
        Gpu(0, "GPU-aaaa1111", "NVIDIA A100-SXM4-40GB", 40960),
        Gpu(1, "GPU-bbbb2222", "Tesla T4, rev. B", 0),
    ]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
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
    ],
)
def test_cuda_visible_devices_is_honoured(visible: str | None, expected: list[int]) -> None:
    assert select_visible(FOUR, visible) == expected


def test_nvml_first_then_nvidia_smi_then_none() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "1,0"}
    assert [g.index for g in discover(env, nvml=lambda: FOUR, smi=lambda: [])] == [1, 0]
    assert [g.index for g in discover(env, nvml=lambda: None, smi=lambda: FOUR[:2])] == [1, 0]
    assert discover({}, nvml=lambda: None, smi=lambda: None) == []


def test_nvidia_smi_runs_the_query_and_fails_soft(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus.shutil, "which", lambda _: "/usr/bin/nvidia-smi")
    seen: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        return subprocess.CompletedProcess(
            argv, 0, stdout="0, GPU-aaaa1111, 16384, Tesla T4\n", stderr=""
        )

    assert gpus.from_nvidia_smi(run) == [Gpu(0, "GPU-aaaa1111", "Tesla T4", 16384)]
    assert seen == [
        [
            "/usr/bin/nvidia-smi",
            "--query-gpu=index,uuid,memory.total,name",
            "--format=csv,noheader,nounits",
        ]
    ]

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


def test_discover_keeps_model_and_memory_in_visible_order() -> None:
    found = [Gpu(0, "GPU-aaaa1111", "A100", 40960), Gpu(1, "GPU-bbbb2222", "T4", 16384)]
    assert (
        gpus.discover({"CUDA_VISIBLE_DEVICES": "1,0"}, nvml=lambda: found, smi=lambda: None)
        == found[::-1]
    )


class FakeNvml:
    """pynvml's calls the agent makes, for two GPUs (older releases answer bytes)."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return f"GPU-{handle}{handle}{handle}".encode()

    def nvmlDeviceGetName(self, handle: int) -> str:
        return ["NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"][handle]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return type("Memory", (), {"total": [40 * 2**30, 80 * 2**30][handle]})()


def test_nvml_reports_uuid_model_and_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    assert gpus.from_nvml() == [
        Gpu(0, "GPU-000", "NVIDIA A100-SXM4-40GB", 40960),
        Gpu(1, "GPU-111", "NVIDIA H100 80GB HBM3", 81920),
    ]


def test_the_probe_asks_the_replica_interpreter_with_pci_order() -> None:
    calls: list[tuple[list[str], dict[str, str]]] = []

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append((argv, kwargs["env"]))
        return subprocess.CompletedProcess(argv, 0, stdout="noise\n2\n", stderr="")

    assert gpus.tensorflow_gpu_count("/opt/py", [3, 1], run) == (2, "")
    argv, env = calls[0]
    assert argv[0] == "/opt/py" and "list_physical_devices('GPU')" in argv[2]
    assert env["CUDA_VISIBLE_DEVICES"] == "3,1" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert not any(name.startswith("COHORT_") for name in env)

    def broken(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(
            argv, 1, stdout="", stderr="ModuleNotFoundError: No module named 'x'\n"
        )

    count, why = gpus.tensorflow_gpu_count("/opt/py", [0], broken)
    assert count is None and "No module named" in why


def test_gpus_tensorflow_cannot_see_are_not_offered(caplog: pytest.LogCaptureFixture) -> None:
    asked: list[Any] = []

    def count(python: str, ids: Any) -> tuple[int | None, str]:
        asked.append(ids)
        return answers[python]

    answers: dict[str, tuple[int | None, str]] = {
        "cpu-only": (0, ""),
        "cuda": (2, ""),
        "absent": (None, "no tensorflow"),
    }
    with caplog.at_level("WARNING", logger="cohort.agent"):
        assert gpus.usable_gpus([0, 1], "cpu-only", True, count) == []
    assert "TensorFlow in cpu-only sees none" in caplog.text
    assert "COHORT_NODE_GPU_PROBE=false" in caplog.text
    assert gpus.usable_gpus([0, 1], "cuda", True, count) == [0, 1]
    assert gpus.usable_gpus([0, 1], "absent", True, count) == [0, 1]
    asked.clear()
    assert gpus.usable_gpus([0, 1], "cpu-only", False, count) == [0, 1]  # trust NVML
    assert gpus.usable_gpus([], "cpu-only", True, count) == []
    assert asked == []  # neither asks TensorFlow
