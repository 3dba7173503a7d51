"""The base of the SDK's typed models (cohort/api_models.py): pydantic models that also
read as the JSON the API sent.

`job.created_at` is a datetime and `job.replica_list[0]` a ReplicaRead; `job["created_at"]`
is the ISO string and `job["replica_list"][0]` the dict, exactly as in the API's JSON, so
code written against the REST API (or a dict of it) works on them unchanged.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic_core import to_jsonable_python


class ApiModel(BaseModel):
    # A newer server's extra fields are kept (and readable by key), never an error.
    model_config = ConfigDict(extra="allow")

    def __getitem__(self, key: str) -> Any:
        """The field as the API's JSON has it."""
        if key not in self:
            raise KeyError(key)
        return to_jsonable_python(getattr(self, key))

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and (
            key in type(self).model_fields or key in (self.model_extra or {})
        )

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as the API sent it."""
        return self.model_dump(mode="json")
