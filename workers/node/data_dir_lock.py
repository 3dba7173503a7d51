"""One agent per node id and DATA_DIR: an agent holds an exclusive lock (flock) on
`DATA_DIR/agent-<digest of its node id>.lock` for as long as it runs.

Agents of different nodes may share a DATA_DIR (shared storage); a second agent of the
same node on the same DATA_DIR (started twice by hand, two supervisors) would take the
first one's replicas for a predecessor's leftovers and end them (leftovers.py: they carry
the same marks), and the two would answer each other's starts. It stops before anything,
saying whose the directory is. The kernel releases the lock when its holder dies,
however it dies (SIGKILL too), so an agent restarted in place takes it at once; the
descriptor is not inherited (Python opens files non-inheritable), so a replica that
outlives its agent does not hold it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path
from typing import IO


class DataDirInUse(RuntimeError):
    """Another live agent holds this DATA_DIR."""


def lock_path(data_dir: Path, node_id: str) -> Path:
    """The lock file of node `node_id` in `data_dir` (a digest: a node id is any string)."""
    return data_dir / f"agent-{hashlib.sha256(node_id.encode()).hexdigest()[:16]}.lock"


def hold(data_dir: Path, node_id: str) -> IO[str]:
    """Take node `node_id`'s lock on DATA_DIR for this process, for as long as the returned
    file stays open; DataDirInUse (naming the holder) if another process holds it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    handle = open(lock_path(data_dir, node_id), "a+")  # noqa: SIM115 - held for life
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise DataDirInUse(
            f"DATA_DIR {data_dir} is in use by another agent of node "
            f"{node_id} ({holder}): stop that one first, or give this one "
            "another COHORT_NODE_ID or COHORT_DATA_DIR"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"node {node_id}, pid {os.getpid()}\n")
    handle.flush()
    return handle
