"""Routes for webhooks (admin only): create one (its secret shown once), list, read,
delete, send a test event, and read a webhook's deliveries with their attempts."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response, status

from api.deps import SessionDep, SettingsDep, TokenDep, scoped
from api.json_body import CohortRoute
from api.openapi import errors
from api.params import DbId
from services.auth.scopes import Scope
from services.models import Webhook
from services.webhooks import store
from services.webhooks.schemas import (
    DeliveryList,
    DeliveryRead,
    WebhookCreate,
    WebhookCreated,
    WebhookList,
    WebhookRead,
)

router = APIRouter(
    prefix="/webhooks",
    tags=["webhooks"],
    route_class=CohortRoute,
    dependencies=scoped(read=Scope.ADMIN, write=Scope.ADMIN),
)


def get_webhook(webhook_id: DbId, session: SessionDep, token: TokenDep) -> Webhook:
    """The webhook in the path, if the caller's project owns it (404 otherwise)."""
    return store.read_webhook(session=session, project_id=token.project_id, webhook_id=webhook_id)


CurrentWebhook = Annotated[Webhook, Depends(get_webhook)]


@router.post("", status_code=status.HTTP_201_CREATED, responses=errors(422))
def create_webhook(
    webhook_in: WebhookCreate, session: SessionDep, settings: SettingsDep, token: TokenDep
) -> WebhookCreated:
    """Send the project's events of the kinds listed to a URL; the answer holds the
    signing secret, shown this once."""
    return store.create_webhook(
        session=session, project_id=token.project_id, webhook_in=webhook_in, settings=settings
    )


@router.get("")
def read_webhooks(session: SessionDep, token: TokenDep) -> WebhookList:
    """The project's webhooks (without their secrets)."""
    return WebhookList(
        items=[
            store.to_read(session=session, webhook=w)
            for w in store.list_webhooks(session=session, project_id=token.project_id)
        ]
    )


@router.get("/{webhook_id}", responses=errors(404))
def read_webhook(webhook: CurrentWebhook, session: SessionDep) -> WebhookRead:
    """A webhook: its URL, events, and how many deliveries are pending or failed."""
    return store.to_read(session=session, webhook=webhook)


@router.delete("/{webhook_id}", status_code=status.HTTP_204_NO_CONTENT, responses=errors(404))
def delete_webhook(webhook: CurrentWebhook, session: SessionDep) -> Response:
    """Delete a webhook and its deliveries; nothing more is sent to it."""
    store.delete_webhook(session=session, webhook=webhook)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{webhook_id}/ping", status_code=status.HTTP_202_ACCEPTED, responses=errors(404))
def ping_webhook(webhook: CurrentWebhook, session: SessionDep) -> DeliveryRead:
    """Send a test event (`ping`) to the webhook, as any delivery is sent."""
    return store.ping(session=session, webhook=webhook)


@router.get("/{webhook_id}/deliveries", responses=errors(404))
def read_deliveries(
    webhook: CurrentWebhook,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> DeliveryList:
    """The webhook's newest deliveries, each with its attempts: when, the answer's status,
    the start of its body or the error, and how long it took."""
    return store.list_deliveries(session=session, webhook=webhook, limit=limit)
