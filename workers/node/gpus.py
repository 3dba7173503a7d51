"""GPU discovery for the node agent: NVML (`nvidia-ml-py`), else `nvidia-smi`.

Honours the agent's own CUDA_VISIBLE_DEVICES the way CUDA does: entries are
indices or (prefixes of) UUIDs, in that order, and the list stops at the first
entry that names no GPU. The ids reported are the physical indices (NVML numbers
GPUs in PCI bus order), since each replica gets its own CUDA_VISIBLE_DEVICES built
from them, with CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA numbers them the same way
(workers/node/environment.py).

What NVML sees is not what TensorFlow can use: a TensorFlow without CUDA support, or
without the CUDA libraries (`cohort[gpu]`), trains on the CPU. So before offering
GPUs the agent asks the replicas' interpreter's TensorFlow how many it sees
(`tensorflow_gpu_count`), and offers none if it sees none.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

log = logging.getLogger("cohort.agent")


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str = ""  # the model, as NVML names it ("NVIDIA A100-SXM4-40GB")
    memory_mb: int = 0  # total memory, MiB


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
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            found.append(
                Gpu(
                    index,
                    _text(pynvml.nvmlDeviceGetUUID(handle)),
                    _text(pynvml.nvmlDeviceGetName(handle)),
                    int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // 2**20,
                )
            )
        return found
    except pynvml.NVMLError:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _text(value: bytes | str) -> str:
    # Older nvidia-ml-py releases return bytes.
    return value.decode() if isinstance(value, bytes) else str(value)


NVIDIA_SMI_QUERY = ("--query-gpu=index,uuid,memory.total,name", "--format=csv,noheader,nounits")


def parse_nvidia_smi(output: str) -> list[Gpu]:
    """Parse `nvidia-smi --query-gpu=index,uuid,memory.total,name --format=csv,noheader,
    nounits` (memory in MiB; the name last, since nothing says it has no comma)."""
    found = []
    for line in output.splitlines():
        parts = [p.strip() for p in line.split(",", 3)]
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        memory = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 0
        found.append(Gpu(int(parts[0]), parts[1], parts[3] if len(parts) > 3 else "", memory))
    return found


def from_nvidia_smi(
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
) -> list[Gpu] | None:
    """The GPUs `nvidia-smi` lists, or None where it is missing or fails."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        done = run(
            [binary, *NVIDIA_SMI_QUERY], capture_output=True, text=True, timeout=15, check=False
        )
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


def discover(
    environ: Mapping[str, str] = os.environ,
    nvml: Callable[[], list[Gpu] | None] = from_nvml,
    smi: Callable[[], list[Gpu] | None] = from_nvidia_smi,
) -> list[Gpu]:
    """The GPUs this node may use: NVML first, `nvidia-smi` second, none else."""
    found = nvml()
    if found is None:
        found = smi()
    by_index = {g.index: g for g in found or []}
    return [by_index[i] for i in select_visible(found or [], environ.get("CUDA_VISIBLE_DEVICES"))]


def node_gpu_ids(configured: int, discovered: list[int]) -> list[int]:
    """COHORT_NODE_GPUS > 0 caps what was found (or names 0..n-1 where nothing was)."""
    if configured <= 0:
        return discovered
    return discovered[:configured] if discovered else list(range(configured))


# Run in the replicas' interpreter: how many GPUs its TensorFlow sees (one line).
_PROBE = "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))"
PROBE_TIMEOUT = 180.0  # importing TensorFlow takes seconds, more on a busy host


def tensorflow_gpu_count(
    python: str,
    gpu_ids: Sequence[int],
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
) -> tuple[int | None, str]:
    """How many of `gpu_ids` the TensorFlow of `python` sees, as a replica given them
    would; None where it could not be asked (no TensorFlow there), with why.

    In a process of its own: the agent never imports TensorFlow (seconds, and memory
    on every GPU it touches). The wheel's own build flags cannot answer this:
    `tensorflow-cpu` for Linux is built with CUDA too, and sees no GPU only for want
    of the CUDA libraries, which `tensorflow[and-cuda]` installs.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    env.update(
        CUDA_DEVICE_ORDER="PCI_BUS_ID",
        CUDA_VISIBLE_DEVICES=",".join(str(i) for i in gpu_ids),
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    try:
        done = run(
            [python, "-c", _PROBE],
            capture_output=True,
            text=True,
            env=env,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"could not run {python}: {exc}"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].isdigit():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"{python} could not import TensorFlow: {last}"
    return int(lines[-1]), ""


def usable_gpus(
    gpu_ids: list[int],
    python: str,
    probe: bool,
    count: Callable[[str, Sequence[int]], tuple[int | None, str]] = tensorflow_gpu_count,
) -> list[int]:
    """The GPU ids to offer: none if the replicas' TensorFlow sees none of them (a
    replica given one would train on the CPU without saying so), all of them otherwise.

    `probe` false (COHORT_NODE_GPU_PROBE=false) trusts NVML: for an interpreter whose
    TensorFlow cannot be asked from here, or `command` jobs that bring their own.
    """
    if not gpu_ids or not probe:
        return gpu_ids
    seen, why = count(python, gpu_ids)
    if seen is None:
        log.warning(
            "cannot tell whether TensorFlow can use GPUs %s (%s): offering them; "
            "a replica given GPUs TensorFlow cannot see fails at start-up",
            gpu_ids,
            why,
        )
        return gpu_ids
    if seen == 0:
        log.warning(
            "offering no GPUs: NVML found %s but TensorFlow in %s sees none (a "
            "build without CUDA support, or without the CUDA libraries: install "
            "cohort[gpu]); set COHORT_NODE_GPU_PROBE=false to offer them anyway",
            gpu_ids,
            python,
        )
        return []
    if seen < len(gpu_ids):
        log.warning("TensorFlow in %s sees %d of GPUs %s", python, seen, gpu_ids)
    return gpu_ids
