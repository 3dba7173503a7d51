"""Every package's docstring is a table of contents of its modules.

A newcomer finds their way by each package's `__init__.py`: a line per module (and per
subpackage, as `name/`) saying what it owns. A module added without its line makes that
map lie by omission, so this test lists every package under the product's roots and
fails naming the modules its docstring does not mention.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("api", "services", "workers", "cli", "cohort")


def packages() -> list[Path]:
    """Every package directory under the roots (links, e.g. services/migrations, left out)."""
    found = []
    for root in ROOTS:
        for init in sorted((REPO / root).rglob("__init__.py")):
            package = init.parent
            inside = package.relative_to(REPO).parents
            if any((REPO / part).is_symlink() for part in [package.relative_to(REPO), *inside]):
                continue
            found.append(package)
    return found


def entries(package: Path) -> list[str]:
    """What the package's table of contents must name: `module.py` and `subpackage/`."""
    modules = [p.name for p in sorted(package.glob("*.py")) if p.name != "__init__.py"]
    subpackages = [
        f"{p.name}/"
        for p in sorted(package.iterdir())
        if p.is_dir() and not p.is_symlink() and (p / "__init__.py").exists()
    ]
    return modules + subpackages


def mentioned(name: str, docstring: str) -> bool:
    """`name` as a word of its own: `keys.py` is not found inside `wire/keys.py`'s path
    of another package, nor `data.py` inside `metadata.py`."""
    return re.search(rf"(?<![\w./]){re.escape(name)}(?![\w])", docstring) is not None


def test_the_roots_are_found() -> None:
    names = {p.relative_to(REPO).as_posix() for p in packages()}
    assert {"api", "services", "workers/node", "cli", "cohort"} <= names, names


@pytest.mark.parametrize("package", packages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_package_docstring_lists_every_module(package: Path) -> None:
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    missing = [name for name in entries(package) if not mentioned(name, docstring)]
    assert not missing, (
        f"{package.relative_to(REPO)}/__init__.py's docstring does not list {missing}: "
        "add a line for each (`name.py  what it owns`)"
    )


def test_a_missing_module_is_named(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text('"""Rooms.\n\n    a.py  the first\n"""\n')
    (tmp_path / "a.py").write_text("")
    (tmp_path / "metadata.py").write_text("")
    docstring = ast.get_docstring(ast.parse((tmp_path / "__init__.py").read_text())) or ""
    assert [n for n in entries(tmp_path) if not mentioned(n, docstring)] == ["metadata.py"]
    assert not mentioned("data.py", "metadata.py")
