"""The settings of an agent's warm replica processes (workers/node/pool.py), a part of
`Settings` (services/settings.py); docs/operations.md#warm-replicas explains them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator
from pydantic_settings import BaseSettings, NoDecode

from services.setting_lists import split_list

# A module's dotted name: what `import NAME` takes, and nothing a shell or a path could use.
ModuleName = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
]


class ReplicaPoolSettings(BaseSettings):
    """How many warm replica processes an agent keeps, and what they import ahead."""

    # Warm replica processes an agent keeps (workers/node/pool.py): Python started and
    # TensorFlow imported, each handed one replica (a `trainer`, `python train.py`), which
    # reaches its first step seconds sooner. "auto": one per free slot, within
    # REPLICA_POOL_MEMORY bytes (~250 MiB each; workers/node/pool_size.py); N: N; 0: off.
    REPLICA_POOL_SIZE: Annotated[int, Field(ge=0, le=64)] | Literal["auto"] = "auto"
    REPLICA_POOL_MEMORY: int = Field(1024 * 1024 * 1024, ge=0)
    # Modules a warm process imports after TensorFlow, so that a job's script importing
    # them does not wait for it: "a.b,c" or a JSON list; "" for TensorFlow alone. By
    # default scikit-learn's data splits, data sets, metrics and preprocessing, which the
    # worker image installs (about 0.4 s of a script's start and 57 MiB a warm process on
    # x86-64). One not installed is skipped.
    REPLICA_POOL_PRELOAD: Annotated[list[ModuleName], NoDecode] = [
        "sklearn.datasets",
        "sklearn.metrics",
        "sklearn.model_selection",
        "sklearn.preprocessing",
    ]

    @field_validator("REPLICA_POOL_PRELOAD", mode="before")
    @classmethod
    def _split_modules(cls, value: object) -> object:
        return split_list(value)
