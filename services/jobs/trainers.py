"""Which trainers a job may name: the built-ins and the allow-listed entrypoints."""

from __future__ import annotations

from services.exceptions import InvalidJobSpec

# name -> "module:function" run inside the replica process.
BUILTIN_TRAINERS: dict[str, str] = {
    "mlp_digits": "workers.replica.trainers.mlp_digits:train",
    "cnn_digits": "workers.replica.trainers.cnn_digits:train",
}


def check_trainer(trainer: str, allowed_entrypoints: list[str], *, in_bundle: bool = False) -> None:
    """Refuse a trainer that is neither built in, nor on the entrypoint allow-list, nor
    (`in_bundle`) a `module:function` of the job's own code bundle."""
    if ":" in trainer:
        if not in_bundle and trainer not in allowed_entrypoints:
            raise InvalidJobSpec(
                "trainer",
                f"entrypoint {trainer!r} is not allowed; an operator must add it to "
                "COHORT_ALLOWED_ENTRYPOINTS, ship it in a code bundle (`cohort job submit "
                "--code DIR`), or use a built-in trainer "
                f"({', '.join(sorted(BUILTIN_TRAINERS))})",
            )
    elif trainer not in BUILTIN_TRAINERS:
        raise InvalidJobSpec(
            "trainer",
            f"unknown trainer {trainer!r}; built-in trainers are: "
            f"{', '.join(sorted(BUILTIN_TRAINERS))}",
        )
