"""What an agent agrees to run: the same policy the api applies when a job is submitted.

A start message comes off Redis, which anyone with the broker's address can write to; the
agent checks it again so a forged message cannot start an unlisted trainer, a reserved
variable or a malformed argv. A refusal is reported as the replica's exit (never started).
"""

from __future__ import annotations

from services.exceptions import InvalidJobSpec
from services.jobs.trainers import check_trainer
from services.storage.keys import InvalidKey, check_key
from services.wire.policy import check_command, check_env, check_input_name
from services.wire.replica import ReplicaSpec


def refusal(spec: ReplicaSpec, allowed_entrypoints: list[str]) -> str | None:
    """Why `spec` may not run on this node, or None if it may."""
    try:
        if spec.trainer is not None:
            # A `module:function` resolves inside the job's bundle only when it has one.
            check_trainer(spec.trainer, allowed_entrypoints, in_bundle=spec.bundle is not None)
        if spec.command is not None:
            check_command(spec.command)
        check_env(spec.env)
        for name, key in spec.inputs.items():
            check_input_name(name)  # it becomes a path under the job's input directory
            check_key(key)  # resolved by the control plane: a full store key
    except (InvalidJobSpec, InvalidKey, ValueError) as exc:
        return f"refused by the node's policy: {exc}"
    return None
