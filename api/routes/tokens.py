"""Routes for API tokens (admins only): issue one (its secret answered once), list them
without secrets, revoke one (with its dashboard sessions, from the next request on)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from api.deps import SessionDep, TokenDep, scoped
from api.json_body import CohortRoute
from api.openapi import errors
from api.params import DbId
from services.auth import tokens
from services.auth.schemas import NAME_PATTERN, TokenCreate, TokenCreated, TokenList, TokenRead
from services.auth.scopes import Scope
from services.models import utcnow

router = APIRouter(
    prefix="/tokens",
    tags=["tokens"],
    route_class=CohortRoute,
    dependencies=scoped(read=Scope.ADMIN, write=Scope.ADMIN),
)


@router.post("", status_code=status.HTTP_201_CREATED)
def create_token(token_in: TokenCreate, session: SessionDep) -> TokenCreated:
    """Issue a token of a project (created if new) with the scopes given; the answer's
    `token` is the only copy of the secret."""
    return tokens.create_token(session=session, token_in=token_in)


@router.get("")
def read_tokens(
    session: SessionDep,
    project: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
) -> TokenList:
    """Every token (of `project` if given), newest first, with its state; no secrets."""
    now = utcnow()
    return TokenList(
        items=[
            tokens.to_read(row, now) for row in tokens.list_tokens(session=session, project=project)
        ]
    )


@router.delete("/{token_id}", responses=errors(409))
def revoke_token(token_id: DbId, session: SessionDep, caller: TokenDep) -> TokenRead:
    """Revoke a token and end its dashboard sessions; refused from the next request on.
    Revoking a revoked token changes nothing; a token cannot revoke itself (409)."""
    return tokens.to_read(
        tokens.revoke_token(session=session, token_id=token_id, caller_id=caller.id)
    )
