"""GPU discovery for the node agent: NVML (`nvidia-ml-py`), else `nvidia-smi`.

Honours the agent's own CUDA_VISIBLE_DEVICES the way CUDA does: entries are
indices or (prefixes of) UUIDs, in that order, and the list stops at the first
entry that names no GPU. The ids reported are the physical indices, since each
replica gets its own CUDA_VISIBLE_DEVICES built from them (workers/node/launcher.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str


def from_nvml() -> list[Gpu] | None:
    """The GPUs NVML sees, or None without NVML (no driver, no library)."""
    try:
        import pynvml  # the module of the nvidia-ml-py package
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(index))
            found.append(Gpu(index, uuid.decode() if isinstance(uuid, bytes) else str(uuid)))
        return found
    except pynvml.NVMLError:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def parse_nvidia_smi(output: str) -> list[Gpu]:
    """Parse `nvidia-smi --query-gpu=index,uuid --format=csv,noheader`."""
    found = []
    for line in output.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            found.append(Gpu(int(parts[0]), parts[1]))
    return found


def from_nvidia_smi(run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
                    ) -> list[Gpu] | None:
    """The GPUs `nvidia-smi` lists, or None where it is missing or fails."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        done = run([binary, "--query-gpu=index,uuid", "--format=csv,noheader"],
                   capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_nvidia_smi(done.stdout) if done.returncode == 0 else None


def select_visible(found: list[Gpu], cuda_visible_devices: str | None) -> list[int]:
    """The physical indices CUDA_VISIBLE_DEVICES lets this node use, in its order."""
    if cuda_visible_devices is None:
        return sorted(g.index for g in found)
    chosen: list[int] = []
    for entry in cuda_visible_devices.split(","):
        entry = entry.strip()
        if entry.isdigit():
            match = [g for g in found if g.index == int(entry)]
        elif entry:
            # A UUID, with or without its "GPU-" prefix, or a unique prefix of one.
            wanted = entry if entry.startswith(("GPU-", "MIG-")) else f"GPU-{entry}"
            match = [g for g in found if g.uuid.startswith(wanted)]
        else:
            match = []
        if len(match) != 1 or match[0].index in chosen:
            break  # CUDA ignores an invalid entry and every entry after it
        chosen.append(match[0].index)
    return chosen


def discover_gpus(
    environ: Mapping[str, str] = os.environ,
    nvml: Callable[[], list[Gpu] | None] = from_nvml,
    smi: Callable[[], list[Gpu] | None] = from_nvidia_smi,
) -> list[int]:
    """The GPU ids this node offers: NVML first, `nvidia-smi` second, none else."""
    found = nvml()
    if found is None:
        found = smi()
    return select_visible(found or [], environ.get("CUDA_VISIBLE_DEVICES"))


def node_gpu_ids(configured: int, discovered: list[int]) -> list[int]:
    """COHORT_NODE_GPUS > 0 caps what was found (or names 0..n-1 where nothing was)."""
    if configured <= 0:
        return discovered
    return discovered[:configured] if discovered else list(range(configured))
