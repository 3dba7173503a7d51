"""A spec the SDK is given: a dict, a typed model (JobCreate, SweepCreate, ...), or the
path of a YAML or JSON file holding one mapping (the CLI's spec files)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

Spec = dict[str, Any] | BaseModel | str | os.PathLike[str]


class SpecFileError(ValueError):
    """A spec file that does not hold one mapping."""


def load_spec_file(path: str | os.PathLike[str], what: str = "job") -> dict[str, Any]:
    """A YAML (or JSON: YAML reads it) file holding one mapping."""
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict):
        raise SpecFileError(f"{path} must hold a mapping (a {what} spec)")
    return data


def spec_dict(spec: Spec, what: str = "job") -> dict[str, Any]:
    """The spec as the JSON the API takes."""
    if isinstance(spec, BaseModel):
        return spec.model_dump(mode="json", exclude_unset=True)
    if isinstance(spec, dict):
        return dict(spec)
    return load_spec_file(spec, what)


def with_bundle(schedule: dict[str, Any], digest: str) -> dict[str, Any]:
    """A schedule spec whose job template (a job's, or a sweep's trials') runs the code
    bundle `digest`.

    Raises:
        ValueError: the spec has no job template.
    """
    if isinstance(schedule.get("job"), dict):
        return {**schedule, "job": {**schedule["job"], "bundle": digest}}
    sweep = schedule.get("sweep")
    if isinstance(sweep, dict) and isinstance(sweep.get("job"), dict):
        return {**schedule, "sweep": {**sweep, "job": {**sweep["job"], "bundle": digest}}}
    raise ValueError("the schedule has no `job` (or `sweep.job`) to run the code with")
