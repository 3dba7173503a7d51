"""Make the interpreter and this checkout reachable by replicas' own uids (`make` runs it).

Run as root, an agent starts each job's replicas as that job's own unprivileged uid
(docs/security.md, "Replicas on a node"), and those processes must be able to run the
node's interpreter and import Cohort's code. An interpreter under a private home (pyenv in
/root, mode 0700) is out of their reach; this adds o+x (enter, not list) to every directory
above the interpreter's installation and above this checkout that lacks it, and says so.
Nothing happens when not root: replicas then run as the invoking user.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path


def ancestors(path: Path) -> list[Path]:
    return [path, *path.parents]


def main() -> None:
    if os.geteuid() != 0:
        return
    here = Path(__file__).resolve().parents[1]
    wanted = {*ancestors(Path(os.path.realpath(sys.base_prefix))), *ancestors(here)}
    for directory in sorted(wanted):
        mode = directory.stat().st_mode
        if not mode & stat.S_IXOTH:
            directory.chmod(mode | stat.S_IXOTH)
            print(f"replica access: o+x on {directory} (replicas run as their job's uid)")  # noqa: T201 - for the person running make


if __name__ == "__main__":
    main()
