"""A `python` command run by a warm process as the fresh interpreter `python ARGS` would.

The warm process (workers/replica/pool_entry.py) has become the replica — user, umask,
directory, environment, log — and runs the job's script or module here as `__main__`:
a new `__main__` module (never the warm process's own), sys.argv, sys.orig_argv and
sys.path[0] as that command line gives them, the file compiled with no inherited
`__future__` flags, `__file__` absolute (Python >= 3.9), `__loader__` a
SourceFileLoader, and `-m` through runpy's `_run_module_as_main`, the function the
interpreter itself calls for it. Signal handlers are the interpreter's defaults: the warm
process sets none. An exception the program does not catch is printed by sys.excepthook
from the program's first frame (as the interpreter prints it) and exits 1; SystemExit
passes through untouched; an uncaught KeyboardInterrupt exits 130, what the cold path's
guard reports for a program SIGINT ended.

What differs from a cold start is what the warm process holds: TensorFlow and the other
modules it imported are in sys.modules already (workers/python_args.py starts a job cold
whose directory would shadow one), and the process has a child of its own, the watcher
that stops it if the agent dies (workers/replica/parent_watch.py; the guard's job on the
cold path, whose program runs as the guard's child instead).
"""

from __future__ import annotations

import builtins
import os
import runpy
import sys
import types
from importlib.machinery import SourceFileLoader
from types import TracebackType

from workers import python_args

SIGINT_EXIT = 130  # 128 + SIGINT, as the guard reports a program the signal ended
CANNOT_OPEN_EXIT = 2  # the interpreter's status for a script it cannot open
# What the interpreter itself calls for `-m` (private, and unchanged since Python 3.4): it
# runs the module in the current `__main__`'s namespace and sets sys.argv[0] to its file.
_RUN_MODULE_AS_MAIN = runpy._run_module_as_main  # type: ignore[attr-defined]  # noqa: SLF001


def run(interpreter_args: list[str], warm_path0: str) -> int:
    """Run `python INTERPRETER_ARGS`'s program in this process; its exit status
    (SystemExit raised by the program propagates). `warm_path0`: the sys.path[0] this
    process started with, replaced by the program's.

    Raises:
        ValueError: the arguments are not a program a warm process runs (the agent
            checked them with the same parser; never expected).
    """
    program = python_args.parse(interpreter_args)
    if program is None:
        raise ValueError(f"not a warm-servable python command: {interpreter_args!r}")
    sys.orig_argv = [sys.orig_argv[0], *interpreter_args]
    path0 = str(program.path0(os.getcwd()))
    if sys.path and sys.path[0] == warm_path0:
        sys.path[0] = path0
    else:
        sys.path.insert(0, path0)
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __annotations__={})
    sys.modules["__main__"] = main
    first: types.CodeType | None = None  # the program's first frame runs this
    try:
        if program.module is not None:
            sys.argv = ["-m", *program.args]
            first = _RUN_MODULE_AS_MAIN.__code__
            _RUN_MODULE_AS_MAIN(program.module, alter_argv=True)
        else:
            assert program.script is not None
            sys.argv = [program.script, *program.args]
            filename = os.path.abspath(program.script)
            try:
                with open(filename, "rb") as handle:
                    source = handle.read()  # bytes: compile() reads the coding cookie
            except OSError as exc:
                print(  # noqa: T201 - the interpreter's own words
                    f"{sys.orig_argv[0]}: can't open file {filename!r}: "
                    f"[Errno {exc.errno}] {exc.strerror}",
                    file=sys.stderr,
                )
                return CANNOT_OPEN_EXIT
            first = compile(source, filename, "exec", dont_inherit=True)
            _run_script(main, first, filename)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - printed as the interpreter prints it
        # The default hook prints the exception's own __traceback__, not its argument.
        shown = exc.with_traceback(_from(exc.__traceback__, first))
        sys.excepthook(type(shown), shown, shown.__traceback__)
        return SIGINT_EXIT if isinstance(exc, KeyboardInterrupt) else 1
    return 0


def _run_script(main: types.ModuleType, code: types.CodeType, filename: str) -> None:
    """Run the script's code in `main`'s namespace, as the interpreter runs a file."""
    main.__dict__.update(
        __file__=filename, __cached__=None, __loader__=SourceFileLoader("__main__", filename)
    )
    try:
        exec(code, main.__dict__)  # noqa: S102 - the job's own program, as `python` runs it
    finally:
        # What the interpreter does once the script returns (or raises).
        main.__dict__.pop("__file__", None)
        main.__dict__.pop("__cached__", None)


def _from(tb: TracebackType | None, first: types.CodeType | None) -> TracebackType | None:
    """The traceback from the frame running `first` on, frames of this module dropped
    (none at all for an error before the program ran: a SyntaxError names its line)."""
    at = tb
    while at is not None and at.tb_frame.f_code is not first:
        at = at.tb_next
    return at
