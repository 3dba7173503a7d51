"""What a replica's own /tmp and /dev/shm cost at its start (workers/private_tmp.py).

A cold replica on a root agent is started through `python -I -m workers.private_tmp`,
which makes a mount namespace with a tmpfs on /tmp and /dev/shm, binds back the paths the
replica needs, drops to the job's uid and execs the replica. This measures, side by side
in one run and interleaved (the order alternating each round), the time from Popen to the
replica's first line of Python for both ways of starting it as the job's uid: Popen's
`user=` straight to the interpreter, and through the wrapper. Each round's ratio is
wrapper / direct; the figure is the median of the per-round ratios, and the extra
milliseconds the median of the per-round differences. The replica is `python -c` writing
the time it started, so what is timed is the start alone, not TensorFlow's import.

    .venv/bin/python bench/private_tmp.py [--rounds 30]      (as root)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UID = 0x7000_0000 + 991  # a job's uid, as the agent picks them (COHORT_REPLICA_UID_BASE)
MARK = "import sys, time; open(sys.argv[1], 'w').write(repr(time.time()))"


def direct(python: str, marker: Path) -> float:
    """Seconds from Popen to the replica's first line of Python, started as UID."""
    marker.unlink(missing_ok=True)
    begun = time.time()
    process = subprocess.Popen(  # noqa: S603 - an argv, never a shell
        [python, "-c", MARK, str(marker)],
        cwd="/",
        umask=0o077,
        env={"PATH": os.defpath},
        user=UID,
        group=UID,
        extra_groups=[],
    )
    if process.wait() != 0:
        raise SystemExit("the direct start failed")
    return float(marker.read_text()) - begun


def wrapped(python: str, marker: Path) -> float:
    """The same through workers/private_tmp.py, as the agent starts a cold replica."""
    read, write = os.pipe()
    argv = [
        python,
        "-I",
        "-m",
        "workers.private_tmp",
        f"--uid={UID}",
        f"--gid={UID}",
        f"--env-fd={read}",
        f"--keep={marker.parent}",
        f"--keep={Path(python).parent.parent}",
        f"--keep={Path(__file__).resolve().parent.parent}",
        "--",
        python,
        "-c",
        MARK,
        str(marker),
    ]
    marker.unlink(missing_ok=True)
    begun = time.time()
    process = subprocess.Popen(  # noqa: S603 - an argv, never a shell
        argv, cwd="/", umask=0o077, env={"PATH": os.defpath}, pass_fds=(read,)
    )
    os.close(read)
    with open(write, "wb", buffering=0) as channel:
        channel.write(json.dumps({"PATH": os.defpath}).encode())
    if process.wait() != 0:
        raise SystemExit("the wrapper failed")
    return float(marker.read_text()) - begun


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the wrapper's mount namespace needs it")
    python = sys.executable
    root = Path(tempfile.mkdtemp(prefix="bench-private-tmp-", dir="/var/tmp"))
    root.chmod(0o777)
    marker = root / "started"
    ratios, extra, plain, through = [], [], [], []
    for number in range(args.rounds + 2):
        sides = [direct, wrapped] if number % 2 else [wrapped, direct]
        times = {side.__name__: side(python, marker) for side in sides}
        if number < 2:
            continue  # warm-up rounds: the page cache, the interpreter's files
        plain.append(times["direct"])
        through.append(times["wrapped"])
        ratios.append(times["wrapped"] / times["direct"])
        extra.append(times["wrapped"] - times["direct"])
    print(f"rounds {args.rounds}, {python}")
    print(f"direct (Popen user=): median {statistics.median(plain) * 1000:.1f} ms")
    print(f"through private_tmp:  median {statistics.median(through) * 1000:.1f} ms")
    print(
        f"median per-round ratio {statistics.median(ratios):.2f}, "
        f"median per-round extra {statistics.median(extra) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
