"""Webhooks from the command line, over the API (an admin token is needed):
`cohort webhook create URL --event E ...`, `list`, `delete ID`, `ping ID`, `deliveries ID`."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from cli.options import (
    FormatOpt,
    JsonOpt,
    ListFormat,
    TokenOpt,
    UrlOpt,
    connect,
    console,
    emit_as,
    emit_json,
    guarded,
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
    if as_json or output != "table":
        emit_as(items, "json" if as_json else output)
        return
    table = Table("id", "url", "events", "pending", "failed", "created")
    for hook in items:
        table.add_row(
            str(hook.id),
            hook.url,
            ", ".join(hook.events),
            str(hook.pending),
            str(hook.failed),
            _when(hook.created_at),
        )
    console.print(table)


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
    if as_json or output != "table":
        emit_as(items, "json" if as_json else output)
        return
    table = Table("delivery", "event", "state", "attempts", "last answer", "next attempt")
    for d in items:
        last = d.attempts[-1] if d.attempts else None
        said = "—" if last is None else f"{last.status_code or '-'} {last.error or last.answer}"
        table.add_row(
            d.id, d.event, d.state, str(len(d.attempts)), said[:80], _when(d.next_attempt_at)
        )
    console.print(table)
