"""The child process that unpacks a bundle into a replica's code directory, as the job's
user: `python -P -m workers.node.code_unpack DEST MAX_FILES MAX_UNPACKED_BYTES`, the
verified archive on its stdin (opened by the agent, so the child needs no access to the
agent's 0700 cache).

Run as the job's uid, an unpack can write nothing the job's own replicas could not: a
flaw in it can no longer make the root agent write a file of the node. The agent
(workers/node/bundle_cache.py) reads the outcome from the exit code and stderr below,
which say nothing of this node's paths.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from pathlib import Path

from services.storage.bundles import BundleRejected, Limits, unpack

REFUSED_EXIT = 3  # stderr: BundleRejected's message (names the member and the fix)
NO_SPACE_EXIT = 4  # the disk is full
FAILED_EXIT = 5  # stderr: what failed, without the node's paths


def argv(python: str, dest: Path, limits: Limits) -> list[str]:
    """The child's command line (the agent's side of this contract)."""
    return [
        python,
        "-P",
        "-m",
        "workers.node.code_unpack",
        str(dest),
        str(limits.max_files),
        str(limits.max_unpacked_bytes),
    ]


def _fresh(dest: Path) -> None:
    # A start re-run after a crash finds the earlier copy: start clean. As the job's
    # uid, in the job's own directory: nothing here can reach another's files.
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.mkdir(mode=0o755)


def main(args: list[str]) -> int:
    """Unpack stdin into args[0]; prints the file count; the exit code says the outcome."""
    dest = Path(args[0])
    limits = Limits(max_files=int(args[1]), max_unpacked_bytes=int(args[2]))
    try:
        _fresh(dest)
        with open(0, "rb", closefd=False) as archive:
            files = unpack(archive, dest, limits)
    except BundleRejected as exc:
        shutil.rmtree(dest, ignore_errors=True)
        sys.stderr.write(str(exc))
        return REFUSED_EXIT
    except OSError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        if exc.errno == errno.ENOSPC:
            return NO_SPACE_EXIT
        # strerror and the member's own name, never the absolute path of the node.
        where = exc.filename if exc.filename and not os.path.isabs(exc.filename) else ""
        sys.stderr.write(f"{exc.strerror or type(exc).__name__}" + (f": {where}" if where else ""))
        return FAILED_EXIT
    sys.stdout.write(f"{files}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
