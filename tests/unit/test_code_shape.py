"""No product module over 350 lines, no function over 60: small pieces named for what
they own are what a newcomer can read in one sitting.

Data tables are excepted, by one narrow rule: a module or function whose lines are at
least three quarters one literal (a dict, list, tuple or set written out) is a table, not
logic to split. So are generated modules, listed in GENERATED with the test that keeps
each equal to its source: nobody edits them. Each failure names every offender with its
size.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("api", "services", "workers", "cli", "cohort")
MAX_MODULE_LINES = 350
MAX_FUNCTION_LINES = 60
TABLE_SHARE = 0.75  # of a module's or function's lines in one literal: a data table
_LITERALS = (ast.Dict, ast.List, ast.Tuple, ast.Set)
# Written by a generator, checked against their source by a test (named beside each).
GENERATED = {
    "cohort/api_models.py",  # deploy/sdk_models.py; tests/unit/test_sdk_models.py
}


def product_modules() -> Iterator[Path]:
    for root in ROOTS:
        yield from sorted((REPO / root).rglob("*.py"))


def _span(node: ast.AST) -> int:
    """The lines a statement or expression spans (0 for what has no position)."""
    start: int = getattr(node, "lineno", 0)
    end: int | None = getattr(node, "end_lineno", None)
    return (end or start) - start + 1 if start else 0


def is_table(node: ast.AST, lines: int) -> bool:
    """Whether one literal inside `node` spans at least TABLE_SHARE of its `lines`."""
    return any(
        isinstance(inner, _LITERALS) and _span(inner) >= TABLE_SHARE * lines
        for inner in ast.walk(node)
    )


def oversized() -> tuple[list[str], list[str]]:
    """The modules over MAX_MODULE_LINES and the functions over MAX_FUNCTION_LINES that
    are not tables, as 'path: N lines' and 'path: name: N lines'."""
    modules, functions = [], []
    for path in product_modules():
        if path.relative_to(REPO).as_posix() in GENERATED:
            continue
        source = path.read_text()
        tree = ast.parse(source)
        name = path.relative_to(REPO)
        size = len(source.splitlines())
        if size > MAX_MODULE_LINES and not is_table(tree, size):
            modules.append(f"{name}: {size} lines")
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = _span(node)
                if length > MAX_FUNCTION_LINES and not is_table(node, length):
                    functions.append(f"{name}: {node.name}: {length} lines")
    return modules, functions


def test_no_product_module_is_over_350_lines() -> None:
    modules, _ = oversized()
    assert not modules, (
        f"modules over {MAX_MODULE_LINES} lines (split them by what each piece owns):\n"
        + "\n".join(modules)
    )


def test_no_product_function_is_over_60_lines() -> None:
    _, functions = oversized()
    assert not functions, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(functions)


def test_a_table_is_one_literal_making_up_most_of_its_lines() -> None:
    table = ast.parse("def codes():\n    return {\n" + "        1: 'a',\n" * 80 + "    }\n")
    logic = ast.parse("def steps():\n" + "    x = 1\n" * 80 + "    return [x]\n")
    assert is_table(table.body[0], _span(table.body[0]))
    assert not is_table(logic.body[0], _span(logic.body[0]))
