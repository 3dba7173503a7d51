"""Webhooks from the command line, over the API (an admin token is needed):
`cohort webhook create URL --event E ...`, `list`, `delete ID`, `ping ID`, `deliveries ID`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.options import (
    Cell,
    FormatOpt,
    JsonOpt,
    ListFormat,
    TokenOpt,
    UrlOpt,
    connect,
    console,
    emit_json,
    guarded,
    print_listing,
)
from services.webhooks.events import EVENTS

app = typer.Typer(
    name="webhook",
    help="Webhooks: the project's events POSTed, signed, to a URL (admins).",
    no_args_is_help=True,
)
WebhookArg = Annotated[int, typer.Argument(help="webhook id")]
EventOpt = Annotated[
    list[str],
    typer.Option("--event", help="repeat for several: " + ", ".join(EVENTS)),
]


def _when(value: Any) -> str:
    return str(value)[:19].replace("T", " ") if value else "—"


@app.command("create")
def create_webhook(
    target: Annotated[str, typer.Argument(metavar="URL", help="http(s):// URL to POST to")],
    event: EventOpt,
    note: Annotated[str, typer.Option(help="what it is for, for people")] = "",
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Send the project's EVENTs to URL; prints the signing secret, this once."""
    created = guarded(lambda: connect(url, token).create_webhook(target, event, note))
    if as_json:
        emit_json(created)
        return
    console.print(
        f"webhook {created.id}: {', '.join(created.events)} to {created.url}\n"
        f"signing secret (shown once, keep it): {created.secret}",
        soft_wrap=True,
        markup=False,
    )


@app.command("list")
def list_webhooks(
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
    output: FormatOpt = ListFormat.table,
) -> None:
    """List the project's webhooks: URL, events, deliveries pending and failed."""
    items = guarded(lambda: connect(url, token).webhooks())
    columns: dict[str, Cell] = {
        "id": lambda h: h.id,
        "url": lambda h: h.url,
        "events": lambda h: ", ".join(h.events),
        "pending": lambda h: h.pending,
        "failed": lambda h: h.failed,
        "created": lambda h: _when(h.created_at),
    }
    print_listing(items, columns, as_json=as_json, output=output)


@app.command("delete")
def delete_webhook(
    webhook_id: WebhookArg, token: TokenOpt = None, url: UrlOpt = None, as_json: JsonOpt = False
) -> None:
    """Delete a webhook; nothing more is sent to it."""
    guarded(lambda: connect(url, token).delete_webhook(webhook_id))
    if as_json:
        emit_json({"deleted": webhook_id})
    else:
        console.print(f"deleted webhook {webhook_id}")


@app.command("ping")
def ping_webhook(
    webhook_id: WebhookArg, token: TokenOpt = None, url: UrlOpt = None, as_json: JsonOpt = False
) -> None:
    """Send a test event (`ping`) to a webhook; `deliveries ID` shows how it went."""
    delivery = guarded(lambda: connect(url, token).ping_webhook(webhook_id))
    if as_json:
        emit_json(delivery)
    else:
        console.print(f"ping {delivery.id} queued for webhook {webhook_id}", markup=False)


@app.command("deliveries")
def list_deliveries(
    webhook_id: WebhookArg,
    limit: Annotated[int, typer.Option(min=1, max=500, help="the newest this many")] = 20,
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
    output: FormatOpt = ListFormat.table,
) -> None:
    """A webhook's newest deliveries and their attempts: status code, answer or error."""
    items = guarded(lambda: connect(url, token).webhook_deliveries(webhook_id, limit))
    columns: dict[str, Cell] = {
        "delivery": lambda d: d.id,
        "event": lambda d: d.event,
        "state": lambda d: d.state,
        "attempts": lambda d: len(d.attempts),
        "last answer": _last_answer,
        "next attempt": lambda d: _when(d.next_attempt_at),
    }
    print_listing(items, columns, as_json=as_json, output=output)


def _last_answer(delivery: Any) -> str:
    if not delivery.attempts:
        return "—"
    last = delivery.attempts[-1]
    return f"{last.status_code or '-'} {last.error or last.answer}"[:80]
