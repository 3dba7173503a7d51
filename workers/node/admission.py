"""What an agent agrees to run: the same policy the api applies when a job is submitted.

A start message comes off Redis, which anyone with the broker's address can write to; the
agent checks it again so a forged message cannot start an unlisted trainer, a reserved
variable or a malformed argv. A refusal is reported as the replica's exit (never started).
"""

from __future__ import annotations

from services.exceptions import InvalidJobSpec
from services.jobs.trainers import check_trainer
from services.storage.keys import InvalidKey, check_key
from services.wire.policy import MAX_COMMAND_ARGS, check_command, check_env
from services.wire.replica import ReplicaSpec


def refusal(spec: ReplicaSpec, allowed_entrypoints: list[str]) -> str | None:
    """Why `spec` may not run on this node, or None if it may."""
    try:
        if spec.trainer is not None:
            # A `module:function` resolves inside the job's bundle only when it has one.
            check_trainer(spec.trainer, allowed_entrypoints, in_bundle=spec.bundle is not None)
        if spec.command is not None:
            if len(spec.command) > MAX_COMMAND_ARGS:
                raise ValueError(f"command: at most {MAX_COMMAND_ARGS} arguments")
            check_command(spec.command)
        check_env(spec.env)
        for name, key in spec.inputs.items():
            _check_input(name, key)
    except (InvalidJobSpec, InvalidKey, ValueError) as exc:
        return f"refused by the node's policy: {exc}"
    return None


def _check_input(name: str, key: str) -> None:
    # A plain file name: it becomes a path under the job's input directory.
    if not name or "/" in name or "\\" in name or name.startswith(".") or "\x00" in name:
        raise ValueError(f"inputs: {name!r} must be a plain file name (no '/', no leading '.')")
    check_key(key)
