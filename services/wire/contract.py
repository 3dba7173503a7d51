"""The shape every wire contract shares: a frozen dataclass, one encoder, one decoder.

Contracts are pydantic dataclasses in strict mode: built in Python they are checked
as they are made, and `decode` checks what arrives (JSON types exactly: no "3" for 3,
no 1.0 for 1) and raises `WireError` naming the field. Unknown keys are ignored, so a
control plane one field ahead of its agents does not stop them. The metric and log
batches decode by hand (services/wire/batches.py): the ingest's hot path.
"""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

STRICT = ConfigDict(strict=True, extra="ignore")

Id = Annotated[int, Field(ge=0)]  # a job id, a replica index, an exit code
Attempt = Annotated[int, Field(ge=1)]
Seconds = Annotated[float, Field(allow_inf_nan=False)]  # unix time


class WireError(ValueError):
    """A message that does not match its contract; says which field and why."""

    def __init__(self, contract: str, field: str, problem: str) -> None:
        super().__init__(f"{contract}: {field}: {problem}")
        self.contract = contract
        self.field = field
        self.problem = problem

    @classmethod
    def of(cls, contract: str, error: ValidationError) -> WireError:
        """The first problem pydantic found, with its field's dotted path."""
        first = error.errors(include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "(message)"
        return cls(contract, field, first["msg"])


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(cls: type) -> TypeAdapter[Any]:
    # One adapter per contract class, built on first use (building one costs ~1 ms).
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


class Contract:
    """Mixin of the wire dataclasses: `encode()` to the JSON text that travels,
    `decode(text)` back, validated."""

    __slots__ = ()

    def encode(self) -> str:
        """The JSON text of this message."""
        return _adapter(type(self)).dump_json(self).decode()

    @classmethod
    def decode(cls, raw: str | bytes) -> Self:
        """The message in `raw`; raises WireError naming the first bad field."""
        try:
            # extra="ignore" reaches the nested models too: a block declared once for the
            # API and the wire (DistributionOptions) refuses unknown keys only at the API.
            decoded: Self = _adapter(cls).validate_json(raw, extra="ignore")
            return decoded
        except ValidationError as exc:
            raise WireError.of(cls.__name__, exc) from None
