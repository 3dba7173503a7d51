"""Pydantic I/O schemas of the token API: create (the secret is answered once), read, list."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictInt, model_validator

from services.auth.scopes import Scope

MAX_LIFETIME = 10 * 366 * 24 * 3600  # seconds: ten years
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
TokenState = Literal["active", "expired", "revoked"]


class TokenCreate(BaseModel):
    """A new token: its project (created if new), a name to know it by, its scopes and,
    optionally, when it expires."""

    model_config = ConfigDict(extra="forbid")

    project: str = Field(
        "default",
        pattern=NAME_PATTERN,
        description="letters, digits, `_`, `.`, `-`; created if new",
    )
    name: str = Field(pattern=NAME_PATTERN, description="what the token is for, e.g. `ci`")
    scopes: list[Scope] = Field(
        min_length=1,
        max_length=len(Scope),
        description="`admin` holds every scope",
        examples=[["read"]],
    )
    expires_in: StrictInt | None = Field(
        None, ge=60, le=MAX_LIFETIME, description="seconds from now"
    )
    expires_at: AwareDatetime | None = Field(None, description="a time with its UTC offset")

    @model_validator(mode="after")
    def _one_expiry(self) -> TokenCreate:
        if self.expires_in is not None and self.expires_at is not None:
            raise ValueError("give expires_in or expires_at, not both")
        self.scopes = sorted(set(self.scopes))
        return self


class TokenRead(BaseModel):
    """A token without its secret: what it may do, and whether it still may."""

    id: int
    project: str
    name: str
    scopes: list[str]
    state: TokenState
    bootstrap: bool = Field(description="registered from COHORT_BOOTSTRAP_TOKEN")
    created_at: dt.datetime
    expires_at: dt.datetime | None
    revoked_at: dt.datetime | None
    last_used_at: dt.datetime | None = Field(description="to the minute")


class TokenCreated(TokenRead):
    """A token just issued, with its secret: this is the only time it is shown."""

    token: str = Field(description="send as `Authorization: Bearer <token>`")


class TokenList(BaseModel):
    items: list[TokenRead]
