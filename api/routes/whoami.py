"""Route for the caller's own token: which project and scopes a token stands for
(`cohort login` checks a token with it before saving it)."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import TokenDep, scoped
from services.auth import tokens
from services.auth.schemas import TokenRead
from services.auth.scopes import Scope

router = APIRouter(prefix="/whoami", tags=["tokens"], dependencies=scoped(write=Scope.ADMIN))


@router.get("")
def read_caller(token: TokenDep) -> TokenRead:
    """The caller's own token, without its secret: project, name, scopes, state."""
    return tokens.to_read(token)
