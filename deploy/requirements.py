"""Print the pinned requirements of pyproject.toml: the base ones and those of the extras named.

The image installs its dependencies from this list in a layer of their own, before any
source is copied, so a change to the code does not reinstall TensorFlow:
    python deploy/requirements.py pyproject.toml worker > requirements.txt
An extra that names Cohort itself (`cohort[worker]`) is followed, not printed.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

SELF = re.compile(r"^cohort\[(?P<extras>[^\]]+)\]$")


def requirements(project: dict[str, Any], extras: list[str]) -> list[str]:
    """The base dependencies and every named extra's, in order, without repeats."""
    found: list[str] = list(project["dependencies"])
    optional: dict[str, list[str]] = project["optional-dependencies"]
    pending = list(extras)
    seen: set[str] = set()
    while pending:
        extra = pending.pop(0)
        if extra in seen:
            continue
        if extra not in optional:
            raise SystemExit(
                f"pyproject.toml has no extra {extra!r} (it has {', '.join(sorted(optional))})"
            )
        seen.add(extra)
        for requirement in optional[extra]:
            nested = SELF.match(requirement.replace(" ", ""))
            if nested:
                pending.extend(nested["extras"].split(","))
            else:
                found.append(requirement)
    return list(dict.fromkeys(found))


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: requirements.py PYPROJECT [EXTRA ...]")
    project = tomllib.loads(Path(sys.argv[1]).read_text())["project"]
    sys.stdout.write("".join(f"{line}\n" for line in requirements(project, sys.argv[2:])))


if __name__ == "__main__":
    main()
