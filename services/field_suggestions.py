"""The field a misspelt one was meant to be: `replica` -> `replicas`.

A request model that refuses unknown fields (`extra="forbid"`: job specs, sweeps,
schedules and their nested blocks) names the unknown one; this finds the model declared
where that key sits and the closest of its field names (difflib), so the answer can say
"did you mean `replicas`?". Pure: types in, a name out.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, Tag


def _unwrapped(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def field_names_at(annotation: Any, path: Sequence[str | int]) -> set[str]:
    """The field names of the model(s) that `path` (an error's location, without the
    unknown key) leads to from `annotation`; empty where no model is declared there."""
    annotation = _unwrapped(annotation)
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        names: set[str] = set()
        # A tagged union's member stands in the location under its tag (`median` in
        # `early_stopping.median.min_steps`): then only that member is meant.
        tagged = [arm for arm in get_args(annotation) if path and _claims(arm, str(path[0]))]
        for arm in tagged:
            names |= field_names_at(arm, path[1:])
        for arm in [] if tagged else get_args(annotation):
            names |= field_names_at(arm, path)
            # A union's member may stand in the location under its tag or class name
            # (`random.lr.uniform.low`): try the rest of the path past that part too.
            fields = _fields(arm)  # (a nested union stands under no name of its own)
            if path and fields and str(path[0]) not in fields:
                names |= field_names_at(arm, path[1:])
        return names
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if not path:
            return set(_fields(annotation))
        field = annotation.model_fields.get(str(path[0]))
        return set() if field is None else field_names_at(field.annotation, path[1:])
    if not path or origin is None:
        return set()
    args = get_args(annotation)
    if origin is dict and len(args) == 2:
        return field_names_at(args[1], path[1:])
    if origin in (list, set, frozenset) and args:
        return field_names_at(args[0], path[1:])
    if origin is tuple and args and isinstance(path[0], int):
        item = args[0] if args[-1] is Ellipsis else args[min(path[0], len(args) - 1)]
        return field_names_at(item, path[1:])
    return set()


def _claims(arm: Any, tag: str) -> bool:
    """Whether a union member is the one that `tag` names: its `Tag`, or the single value
    of one of its `Literal` fields (a discriminator's)."""
    if get_origin(arm) is Annotated and any(
        isinstance(meta, Tag) and meta.tag == tag for meta in get_args(arm)[1:]
    ):
        return True
    arm = _unwrapped(arm)
    if not (isinstance(arm, type) and issubclass(arm, BaseModel)):
        return False
    return any(
        get_origin(field.annotation) is Literal and get_args(field.annotation) == (tag,)
        for field in arm.model_fields.values()
    )


def _fields(arm: Any) -> set[str]:
    arm = _unwrapped(arm)
    if isinstance(arm, type) and issubclass(arm, BaseModel):
        return {field.alias or name for name, field in arm.model_fields.items()}
    return set()


def close_field(annotation: Any, loc: Sequence[str | int]) -> str | None:
    """The declared field closest to the unknown key at the end of `loc` (under the
    model `annotation`), or None when none is close enough."""
    if not loc:
        return None
    key = str(loc[-1])
    names = sorted(field_names_at(annotation, loc[:-1]))
    # A key that begins a declared name is that name cut short (`gpus` for
    # `gpus_per_replica`); otherwise a close spelling, closer than difflib's default asks
    # (at 0.6 `gpus` would be `inputs`).
    started = [name for name in names if len(key) >= 3 and name.startswith(key)]
    matches = difflib.get_close_matches(key, started or names, n=1, cutoff=0 if started else 0.7)
    return matches[0] if matches else None
