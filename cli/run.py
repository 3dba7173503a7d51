"""`cohort run [OPTIONS] -- python train.py ARGS`: a command job without a spec file.

Everything a job spec says is an option or a `--set key=value` (dotted keys for nested
fields: `--set env.LOG_LEVEL=debug`, `--set hyperparameters.learning_rate=0.1`); the
server checks the result as it checks a spec file, before any code is packed.

The code: `--code DIR`, or, when the command runs a script that is in the current
directory (`python train.py`), the current directory, said on stderr: a script the
replicas cannot find fails later and further away than a larger upload costs now. A
command naming no such file (`python -m pkg.train`, a program on the nodes) sends no
code unless `--code` is given.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from cli.options import FollowOpt, JsonOpt, OutputOpt, TokenOpt, UrlOpt, console, err
from services.jobs.spec import JobSpec

_PYTHON = re.compile(r"python[0-9.]*")
# Interpreter options that take the next word as their value (`python -W ignore x.py`).
_OPTION_VALUES = frozenset({"-W", "-X", "-Q"})
# Spec fields whose values are text (and maps of text) as written: `--set name=2024`,
# `--set env.RETRIES=3` stay strings, where YAML would read numbers.
_TEXT = frozenset(n for n, f in JobSpec.model_fields.items() if f.annotation in (str, str | None))
_TEXT_MAPS = frozenset(n for n, f in JobSpec.model_fields.items() if f.annotation == dict[str, str])


def _value(path: list[str], raw: str) -> Any:
    if (len(path) == 1 and path[0] in _TEXT) or (len(path) == 2 and path[0] in _TEXT_MAPS):
        return raw
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw  # not YAML: the text itself, which the server names if it is refused


def parse_sets(pairs: list[str]) -> dict[str, Any]:
    """`--set key=value` pairs as a spec: dotted keys nest (`roles.ps=1`), values are
    YAML scalars or lists (`0.1`, `never`, `[10, 15]`), except the fields of text
    (`name`, `env.*`, `inputs.*`: kept as written, the key past `inputs.` whole)."""
    spec: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        path = key.strip().split(".")
        if path[0] in _TEXT_MAPS and len(path) > 2:  # a file name's dots: `inputs.t.csv`
            path = [path[0], ".".join(path[1:])]
        if not sep or not all(path):
            raise typer.BadParameter(f"give key=value, got {pair!r}", param_hint="--set")
        node = spec
        for depth, part in enumerate(path[:-1]):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                where = ".".join(path[: depth + 1])
                raise typer.BadParameter(f"{where} is a value, not a mapping", param_hint="--set")
        node[path[-1]] = _value(path, raw)
    return spec


def script_of(command: list[str]) -> str | None:
    """The file a `python [OPTIONS] FILE ARGS` command runs, as written; None for
    `python -m`, `python -c` or a program that is not Python."""
    if not command or not _PYTHON.fullmatch(Path(command[0]).name):
        return None
    words = iter(command[1:])
    for word in words:
        if word in ("-m", "-c", "-"):
            return None
        if word in _OPTION_VALUES:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def default_name(command: list[str]) -> str:
    """The job's name when none is given: the script's stem (`train` for `python
    train.py`), the module's last part for `python -m pkg.train`, else the program's."""
    script = script_of(command)
    if script is not None:
        name = Path(script).stem
    elif len(command) > 2 and _PYTHON.fullmatch(Path(command[0]).name) and "-m" in command:
        name = command[command.index("-m") + 1].rsplit(".", 1)[-1]
    else:
        name = Path(command[0]).name
    return re.sub(r"[^\w.\- ]", "-", name)[:128] or "job"


def default_code(command: list[str]) -> Path | None:
    """The current directory when the command's script is a file in it, else None."""
    script = script_of(command)
    if script is None or Path(script).is_absolute() or not Path(script).is_file():
        return None
    return Path(".")


def run(
    command: Annotated[
        list[str],
        typer.Argument(metavar="COMMAND", help="what each replica runs: python train.py ARGS"),
    ],
    replicas: Annotated[int | None, typer.Option(help="processes in the gang")] = None,
    strategy: Annotated[
        str | None,
        typer.Option(help="multi_worker_mirrored, mirrored, parameter_server or one_device"),
    ] = None,
    code: Annotated[
        Path | None,
        typer.Option(
            help="the directory to pack and run in (default: . when the script is in it)",
            exists=True,
            file_okay=False,
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="default: the script's name")] = None,
    sets: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="any spec field: key=value, dotted for nested ones "
            "(env.FOO=bar, hyperparameters.learning_rate=0.1); repeatable",
        ),
    ] = None,
    follow: FollowOpt = False,
    output: OutputOpt = True,
    token: TokenOpt = None,
    url: UrlOpt = None,
    idempotency_key: str | None = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a command as a job, no spec file: `cohort run --replicas 2 -- python train.py
    --lr 0.1`; with --follow, show its replicas' output and progress, and its outcome."""
    from cli.submission import submit_spec

    spec = parse_sets(sets or [])
    given = {"name": name, "replicas": replicas, "strategy": strategy}
    spec |= {key: value for key, value in given.items() if value is not None}
    spec["command"] = command
    spec.setdefault("name", default_name(command))
    if code is None:
        code = default_code(command)
        if code is not None:
            (err if as_json else console).print(
                f"{script_of(command)} is in the current directory: sending it as the "
                "job's code (--code .)"
            )
    submit_spec(
        spec,
        code=code,
        follow=follow,
        output=output,
        token=token,
        url=url,
        idempotency_key=idempotency_key,
        as_json=as_json,
    )
