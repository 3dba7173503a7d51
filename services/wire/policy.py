"""Checks on the parts of a job spec that reach a replica's process: its argv and its
environment. Plain functions in the wire room, so the api (services/jobs/schemas.py) and
the node agent (workers/node/admission.py, on every start message it receives) apply the
same rules."""

from __future__ import annotations

import re

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Variables Cohort sets itself, or that change what the interpreter or the loader run.
ENV_RESERVED_NAMES = frozenset({"TF_CONFIG"})
ENV_RESERVED_PREFIXES = ("LD_", "PYTHON", "COHORT_", "AIP_")
MAX_ENV_VARIABLES = 128
MAX_ENV_VALUE = 32_768
MAX_COMMAND_ARGS = 64
MAX_COMMAND_ARG = 4096


def check_command(argv: list[str]) -> list[str]:
    """Return `argv` if it can be a process's argv (never through a shell).

    Raises:
        ValueError: an empty program, a NUL byte, an argument past MAX_COMMAND_ARG.
    """
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
            raise ValueError(f"variable {name!r}: a name is letters, digits and '_', "
                             "not starting with a digit")
        if name in ENV_RESERVED_NAMES or name.startswith(ENV_RESERVED_PREFIXES):
            raise ValueError(f"variable {name!r} is reserved (Cohort sets TF_CONFIG, "
                             "COHORT_* and AIP_*; LD_* and PYTHON* change what runs): "
                             "use another name")
        if "\x00" in text or len(text) > MAX_ENV_VALUE:
            raise ValueError(f"variable {name!r}: the value has a NUL byte or is longer "
                             f"than {MAX_ENV_VALUE} characters")
    return env
