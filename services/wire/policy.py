"""Checks on the parts of a job spec that reach a replica's process: its argv, its
environment, the names of its input files and its image. Plain functions in the wire room,
so the api (services/jobs/schemas.py) and the node agent (workers/node/admission.py, on every start
message it receives) apply the same rules."""

from __future__ import annotations

import re

from services.storage.keys import DATA_PREFIX, InvalidKey, check_data_path

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Variables Cohort sets itself, or that change what the interpreter or the loader run.
ENV_RESERVED_NAMES = frozenset({"TF_CONFIG"})
ENV_RESERVED_PREFIXES = ("LD_", "PYTHON", "COHORT_", "AIP_")
MAX_ENV_VARIABLES = 128
MAX_ENV_VALUE = 32_768
MAX_COMMAND_ARGS = 64
MAX_COMMAND_ARG = 4096
MAX_INPUTS = 32
MAX_INPUT_NAME = 100
_INPUT_NAME_BAD = re.compile(r"[/\\\x00-\x1f\x7f]")
# An image reference as docker's and podman's reference grammar spells it
# (distribution/reference): [registry[:port]/]path[:tag][@digest]. Nothing else gets
# through, so no shell character, space or leading '-' (an option) reaches the engine.
_IMAGE_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_IMAGE_DOMAIN = rf"{_IMAGE_LABEL}(?:\.{_IMAGE_LABEL})*"
_IMAGE_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(
    rf"(?:{_IMAGE_DOMAIN}(?::[0-9]{{1,5}})?/)?{_IMAGE_PATH}(?:/{_IMAGE_PATH})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,128})?"
)
MAX_IMAGE_REFERENCE = 255


def check_command(argv: list[str]) -> list[str]:
    """Return `argv` if it can be a process's argv (never through a shell).

    Raises:
        ValueError: an empty program, a NUL byte, an argument past MAX_COMMAND_ARG, more
            than MAX_COMMAND_ARGS arguments.
    """
    if len(argv) > MAX_COMMAND_ARGS:
        raise ValueError(f"command: at most {MAX_COMMAND_ARGS} arguments")
    if not argv or not argv[0].strip():
        raise ValueError("command[0], the program to run, must not be empty")
    for index, arg in enumerate(argv):
        if "\x00" in arg:
            raise ValueError(f"command[{index}] contains a NUL byte")
        if len(arg) > MAX_COMMAND_ARG:
            raise ValueError(f"command[{index}] is longer than {MAX_COMMAND_ARG} characters")
    return argv


def check_env(env: dict[str, str]) -> dict[str, str]:
    """Return `env` if every name is valid and none is reserved.

    Raises:
        ValueError: naming the first variable refused and why.
    """
    if len(env) > MAX_ENV_VARIABLES:
        raise ValueError(f"at most {MAX_ENV_VARIABLES} variables")
    for name, text in env.items():
        if not ENV_NAME.fullmatch(name):
            raise ValueError(
                f"variable {name!r}: a name is letters, digits and '_', not starting with a digit"
            )
        if name in ENV_RESERVED_NAMES or name.startswith(ENV_RESERVED_PREFIXES):
            raise ValueError(
                f"variable {name!r} is reserved (Cohort sets TF_CONFIG, "
                "COHORT_* and AIP_*; LD_* and PYTHON* change what runs): "
                "use another name"
            )
        if "\x00" in text or len(text) > MAX_ENV_VALUE:
            raise ValueError(
                f"variable {name!r}: the value has a NUL byte or is longer "
                f"than {MAX_ENV_VALUE} characters"
            )
    return env


def check_input_name(name: str) -> str:
    """Return `name` if it can be a file directly in the replica's input directory.

    Raises:
        ValueError: empty, too long, with a '/', a backslash or a control character, or
            starting with '.' (no hidden files, no '.' or '..').
    """
    if not name or len(name) > MAX_INPUT_NAME:
        raise ValueError(f"input name {name!r} must be 1..{MAX_INPUT_NAME} characters")
    if _INPUT_NAME_BAD.search(name) or name.startswith("."):
        raise ValueError(
            f"input name {name!r} must be a plain file name (no '/', no "
            "backslash or control characters, not starting with '.'), "
            "such as 'train.csv'"
        )
    return name


def check_inputs(inputs: dict[str, str]) -> dict[str, str]:
    """Return `inputs` ({local file name: "data/<path>"}) if every name and path is valid.

    Raises:
        ValueError: naming the first entry refused and why.
    """
    if len(inputs) > MAX_INPUTS:
        raise ValueError(f"at most {MAX_INPUTS} inputs")
    for name, source in inputs.items():
        check_input_name(name)
        path = source.removeprefix(f"{DATA_PREFIX}/")
        if path == source:
            raise ValueError(
                f"input {name!r}: {source!r} must name the project's data as "
                "'data/<path>' (upload it with `cohort data push FILE PATH`)"
            )
        try:
            check_data_path(path)
        except InvalidKey as exc:
            raise ValueError(f"input {name!r}: {exc}") from exc
    return inputs


def check_image(reference: str) -> str:
    """Return `reference` if it is an image reference, e.g. `localhost/team-tf:1`.

    Raises:
        ValueError: saying what an image reference looks like.
    """
    if len(reference) > MAX_IMAGE_REFERENCE or not IMAGE_REFERENCE.fullmatch(reference):
        raise ValueError(
            f"{reference[:80]!r} is not an image reference: give NAME[:TAG] or "
            "NAME@sha256:DIGEST, e.g. 'localhost/team-tf:1' (lowercase path; letters, "
            "digits, '.', '_', '-' and '/'; no spaces or shell characters)"
        )
    return reference
