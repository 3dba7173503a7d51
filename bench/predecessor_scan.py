"""What an agent's start pays to end what a previous agent of its node left running
(workers/node/leftovers.end_predecessors): a scan of every process's environment for the
node's marks. Measured with nothing to end, in a process table of the machine's own
processes and with `--extra` more (sleepers carrying another node's marks, which the scan
reads and leaves), side by side in one run; then the time to end `--left` frozen processes
carrying this node's marks (SIGSTOPped, as a replica frozen when its agent died).

    .venv/bin/python bench/predecessor_scan.py [--rounds 5] [--extra 300] [--left 4]
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workers.node import leftovers  # noqa: E402
from workers.node.environment import agent_marks  # noqa: E402


def sleepers(count: int, node_id: str, data_dir: Path) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, **agent_marks(node_id, data_dir)}
    return [
        subprocess.Popen(["sleep", "600"], env=env, start_new_session=True) for _ in range(count)
    ]


def scan(node_id: str, data_dir: Path) -> tuple[float, float, int]:
    """(wall ms, CPU ms, processes ended) of one end_predecessors."""
    wall, cpu = time.perf_counter(), time.process_time()
    ended = leftovers.end_predecessors(node_id, data_dir)
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000, ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--extra", type=int, default=300)
    parser.add_argument("--left", type=int, default=4)
    args = parser.parse_args()
    logging.getLogger("cohort.agent").setLevel(logging.ERROR)  # its warning: printed below
    data_dir = Path(tempfile.mkdtemp(prefix="bench-scan-"))
    others: list[subprocess.Popen[bytes]] = []
    rows: dict[int, list[tuple[float, float]]] = {0: [], args.extra: []}
    counts: dict[int, int] = {}
    try:
        for _ in range(args.rounds):
            for extra in rows:  # alternating: the machine's table, then the bigger one
                if len(others) < extra:
                    others += sleepers(extra - len(others), "another-node", data_dir)
                elif extra == 0:
                    for process in others:
                        process.kill()
                        process.wait()
                    others = []
                counts[extra] = sum(1 for name in os.listdir("/proc") if name.isdigit())
                wall, cpu, ended = scan("bench-node", data_dir)
                assert ended == 0, ended
                rows[extra].append((wall, cpu))
        print(f"a scan with nothing to end, median of {args.rounds} rounds, alternating:")
        for extra, values in rows.items():
            label = f"{counts[extra]} processes" + (
                f" ({extra} carrying another node's marks)" if extra else ""
            )
            print(
                f"  {label:<50} {statistics.median(v[0] for v in values):7.1f} ms wall "
                f"{statistics.median(v[1] for v in values):7.1f} ms CPU"
            )
        for process in others:
            process.kill()
            process.wait()
        left = sleepers(args.left, "bench-node", data_dir)
        for process in left:
            os.kill(process.pid, signal.SIGSTOP)
        wall, cpu, ended = scan("bench-node", data_dir)
        for process in left:
            process.wait()  # reaped here; the scan waited for them to be gone
        print(f"ending {ended} frozen processes of this node: {wall:.1f} ms wall, {cpu:.1f} ms CPU")
    finally:
        for process in others:
            process.kill()
        os.rmdir(data_dir)


if __name__ == "__main__":
    main()
