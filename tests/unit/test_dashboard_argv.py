"""The submit form splits its one-line command as Python's shlex.split (a POSIX shell's
word splitting) would: run with Node on the dashboard's own script, compared with shlex."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "api" / "static" / "dashboard.js"
LINES = [
    "python train.py --epochs 3",
    "python -c 'print(1 + 1)'",
    'a "b c" d\\ e',
    'x "a\\"b" \'c\\d\'',
    "  spaced   out  ",
    'empty "" word',
    "mix\"ed\"'q'",
    '"a\\\\b"',
    "a\\\\b",
    "echo $HOME `id` ; rm -rf /",
    "tab\tseparated\nlines",
]


def split_in_node(lines: list[str]) -> list[list[str] | str]:
    source = re.search(r"function splitArgv\(line\) \{.*?\n\}\n", SCRIPT.read_text(), re.S)
    assert source, "splitArgv is gone from dashboard.js"
    program = source.group(0) + (
        f"console.log(JSON.stringify({json.dumps(lines)}.map((l) => {{"
        "try { return splitArgv(l); } catch (e) { return e.message; } })));"
    )
    done = subprocess.run(
        ["node", "-e", program], capture_output=True, text=True, timeout=30, check=True
    )
    return json.loads(done.stdout)


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_the_form_splits_a_command_line_as_shlex_does() -> None:
    assert split_in_node(LINES) == [shlex.split(line) for line in LINES]


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_an_unclosed_quote_is_an_error_not_a_guess() -> None:
    assert split_in_node(["python 'train.py", 'say "hi']) == ["no closing '", 'no closing "']
