"""`cohort login`: check a token against the API, then save it with the API's URL as this
user's default (cli/user_config.py), so that every command finds both from any directory."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.options import JsonOpt, UrlOpt, console, emit_json, guarded
from cli.user_config import read_config, resolve, save_config
from cohort.client import Client


def login(
    url: UrlOpt = None,
    token: Annotated[
        str | None, typer.Option(help="API token (asked for, unechoed, if not given)")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Save an API's URL and a token for every later command, once the API accepts it."""
    target = url or read_config().get("url") or resolve(None, None).url
    secret = (token or typer.prompt(f"token for {target}", hide_input=True)).strip()
    if not secret:
        raise typer.BadParameter("an empty token", param_hint="--token")
    client = Client(target, secret, token_source="--token" if token else "the prompt")
    me: dict[str, Any] = guarded(lambda: client.request("GET", "/api/v1/whoami"))
    path = save_config(client.base_url, secret)
    if as_json:
        emit_json(me)
        return
    console.print(
        f"logged in to {client.base_url}: token '{me['name']}' of project '{me['project']}' "
        f"({', '.join(me['scopes'])}); saved in {path}"
    )
