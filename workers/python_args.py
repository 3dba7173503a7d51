"""Which `python ...` commands a warm process may run in place of a fresh interpreter.

A `command` job whose program is the node's `python` running a script (`python train.py
ARGS`) or a module (`python -m pkg.train ARGS`), optionally with `-u` (a no-op: every
replica runs with PYTHONUNBUFFERED=1 already), can be handed to a warm replica process
(workers/node/pool.py), which runs it as `__main__` exactly as that interpreter would
(workers/replica/warm_program.py). Any other option changes the interpreter itself (-O,
-X, -W, -I, -E, -S...) or reads its program from elsewhere (-c, stdin): such a command
starts cold.

A warm process has imported TensorFlow and what it needs; a fresh interpreter looks for
each of those modules first in the directory it puts at sys.path[0] (the script's, or
the working directory for -m). A job whose directory holds a module or a package of such
a name (its own `numpy.py`, a `google/` folder) would get another module warm than cold,
so it starts cold (`shadowed`). Node and replica code both read this module: standard
library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Options with the same effect in a warm process as on a fresh interpreter's command line.
_NO_OPS = ("-u",)
# A file or folder Python's path finder could import as a top-level module: a source or
# bytecode file, an extension module (name.<tag>.so), a package or a namespace portion.
_MODULE_SUFFIXES = (".py", ".pyc", ".so")


@dataclass(frozen=True)
class PythonProgram:
    """`python [-u] SCRIPT ARGS` (module None) or `python [-u] -m MODULE ARGS`."""

    script: str | None
    module: str | None
    args: list[str]  # sys.argv[1:]

    def path0(self, cwd: str | Path) -> Path:
        """What a fresh interpreter puts at sys.path[0]: the script's directory, links
        resolved, or (for -m) the working directory."""
        if self.script is None:
            return Path(os.path.abspath(cwd))
        return Path(os.path.realpath(os.path.join(cwd, self.script))).parent


def parse(interpreter_args: list[str]) -> PythonProgram | None:
    """The program of `python INTERPRETER_ARGS`, if a warm process can run it; else None."""
    args = list(interpreter_args)
    while args and args[0] in _NO_OPS:
        args.pop(0)
    if not args:
        return None  # the interactive interpreter on stdin
    if args[0] == "-m":
        if len(args) < 2 or not _dotted_name(args[1]):
            return None
        return PythonProgram(None, args[1], args[2:])
    if args[0].startswith("-"):
        return None  # another option, or `-` (stdin)
    return PythonProgram(args[0], None, args[1:])


def _dotted_name(text: str) -> bool:
    return all(part.isidentifier() for part in text.split("."))


def module_names(directory: str | Path) -> set[str]:
    """The top-level module names `directory` offers as a sys.path entry (a folder counts
    whether or not it holds __init__.py: it may be a namespace portion)."""
    names = set()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return {"*"}  # unreadable: assume it shadows everything
    for entry in entries:
        name = entry.name
        try:
            folder = entry.is_dir()
        except OSError:
            folder = False
        if folder:
            names.add(name)
        elif name.endswith(_MODULE_SUFFIXES):
            names.add(name.split(".", 1)[0])
    return names


def shadowed(offered: set[str], preloaded: frozenset[str]) -> bool:
    """Whether a sys.path[0] offering the module names `offered` (`module_names`) would
    replace a module a warm process has imported already (a fresh interpreter would
    import the directory's instead)."""
    return "*" in offered or bool(offered & preloaded)
