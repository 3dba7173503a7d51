"""What a TensorFlow checkpoint directory holds: state files, the data they name, scratch.

TensorFlow writes a checkpoint's data and `.index` files first and its state file
`checkpoint` (which names the newest one) last. Under MultiWorkerMirroredStrategy
tf-keras' BackupAndRestore writes the chief's checkpoint to `<backup_dir>/chief/` and
every other worker to a scratch `workertemp_<task>/` it deletes again. Pure: names in,
names out (workers/node/checkpoint_mirror.py reads and sends the files).
"""

from __future__ import annotations

import os
import re

STATE_FILE = "checkpoint"  # tf.train.CheckpointManager's state file
# Scratch that is never the real checkpoint: a non-chief worker's copy (tf-keras'
# distributed_file_utils), TensorFlow's shards before they are merged (`<prefix>_temp/`,
# `<prefix>_temp_<hex>/`) and its atomic writes in progress (`<name>.tmp<hex>`).
_SCRATCH_DIR = re.compile(r"workertemp_\d+|.*_temp(_[0-9a-f]+)?")
_SCRATCH_FILE = re.compile(r".*\.tmp[0-9a-f]{32}|.*\.partial")
_STATE_PATHS = re.compile(
    r'^\s*(?:model_checkpoint_path|all_model_checkpoint_paths)\s*:\s*"((?:[^"\\]|\\.)*)"',
    re.MULTILINE,
)
_SHARD = re.compile(r"\.data-(\d+)-of-(\d+)")
_NUMBER = re.compile(r"-(\d+)$")


def is_scratch(rel: str) -> bool:
    """Whether a path under the checkpoint directory is scratch, never mirrored."""
    *dirs, name = rel.split("/")
    return any(_SCRATCH_DIR.fullmatch(d) for d in dirs) or bool(_SCRATCH_FILE.fullmatch(name))


def is_state(rel: str) -> bool:
    return rel.rsplit("/", 1)[-1] == STATE_FILE and not is_scratch(rel)


def is_data(rel: str) -> bool:
    return not is_scratch(rel) and not is_state(rel)


def named_checkpoints(state: bytes) -> list[str]:
    """The checkpoint prefixes a state file names, the newest first (its
    model_checkpoint_path, then all_model_checkpoint_paths), as base names."""
    text = state.decode("utf-8", errors="replace")
    names = [os.path.basename(m.replace('\\"', '"')) for m in _STATE_PATHS.findall(text)]
    return list(dict.fromkeys(name for name in names if name))


def checkpoint_files(directory: str, prefix: str, present: set[str]) -> list[str] | None:
    """Every file of checkpoint `prefix` in `directory` ('' for the top), as relative
    paths, if `present` holds all of them (its .index and each data shard); else None."""
    base = f"{directory}/{prefix}" if directory else prefix
    shards = [rel for rel in present if rel.startswith(f"{base}.data-")]
    counts = {int(m.group(2)) for rel in shards if (m := _SHARD.search(rel[len(base) :]))}
    if f"{base}.index" not in present or len(counts) != 1:
        return None
    total = counts.pop()
    wanted = [f"{base}.data-{i:05d}-of-{total:05d}" for i in range(total)]
    if not set(wanted) <= present:
        return None
    return [f"{base}.index", *wanted]


def newer(stored: bytes, local: bytes | None) -> bool:
    """Whether the stored state file names a newer checkpoint than the local one."""
    if local is None:
        return True
    if local == stored:
        return False
    numbers = [
        _NUMBER.search(names[0]) if names else None
        for names in (named_checkpoints(stored), named_checkpoints(local))
    ]
    if numbers[0] and numbers[1]:  # CheckpointManager counts on across restores
        return int(numbers[0].group(1)) > int(numbers[1].group(1))
    return True  # the store holds the gang's checkpoint; a different one here is older


def differs(stored: bytes, local: bytes | None) -> bool:
    return stored != local
