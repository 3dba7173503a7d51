"""List settings from the environment: what a `NoDecode` list field's validator calls
(services/settings.py, services/replica_pool_settings.py)."""

from __future__ import annotations

import json


def split_list(value: object) -> object:
    """A setting's list from the environment: "a,b" or a JSON list ("" is none)."""
    if isinstance(value, str):
        if value.strip().startswith("["):
            return json.loads(value)
        return [item.strip() for item in value.split(",") if item.strip()]
    return value
