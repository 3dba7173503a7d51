"""API tokens from the command line, over the API (an admin token is needed):
`cohort token list`, `cohort token create`, `cohort token revoke ID`."""

from __future__ import annotations

import re
from typing import Annotated, Any

import typer

from cli.options import (
    FormatOpt,
    JsonOpt,
    ListFormat,
    TokenOpt,
    UrlOpt,
    api,
    console,
    emit_json,
    err,
    print_listing,
)
from services.auth.scopes import GRANTS, Scope

app = typer.Typer(
    name="token", help="API tokens: list, issue and revoke them (admins).", no_args_is_help=True
)
_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
ScopeOpt = Annotated[
    list[Scope],
    typer.Option(
        "--scope",
        help="repeat for several: " + "; ".join(f"{s.value}: {w}" for s, w in GRANTS.items()),
    ),
]


def parse_duration(text: str) -> int:
    """'90d', '12h', '30m', '45s' or plain seconds, as seconds."""
    match = _DURATION.match(text.strip())
    if match is None:
        err.print(f"[red]--expires-in {text!r}: give a number with s, m, h or d, e.g. 90d[/]")
        raise typer.Exit(2)
    return int(match[1]) * _UNIT[match[2]]


def _when(value: str | None) -> str:
    return value[:16].replace("T", " ") if value else "—"


@app.command("list")
def list_tokens(
    project: Annotated[str | None, typer.Option(help="only this project's")] = None,
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
    output: FormatOpt = ListFormat.table,
) -> None:
    """List tokens (no secrets): project, name, scopes, state, expiry, last use."""
    path = "/api/v1/tokens" + (f"?project={project}" if project else "")
    items: list[dict[str, Any]] = api(url, token, "GET", path)["items"]
    print_listing(
        items,
        {
            "id": lambda i: i["id"],
            "project": lambda i: i["project"],
            "name": lambda i: i["name"] + (" (bootstrap)" if i["bootstrap"] else ""),
            "scopes": lambda i: ", ".join(i["scopes"]),
            "state": lambda i: i["state"],
            "expires": lambda i: _when(i["expires_at"]),
            "last used": lambda i: _when(i["last_used_at"]),
        },
        as_json=as_json,
        output=output,
    )


@app.command("create")
def create(
    name: Annotated[str, typer.Option(help="what it is for, e.g. ci")],
    scope: ScopeOpt,
    project: Annotated[str, typer.Option(help="created if new")] = "default",
    expires_in: Annotated[str | None, typer.Option(help="e.g. 90d, 12h, 30m; unset: never")] = None,
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Issue a token; its secret is printed this once and never again."""
    body: dict[str, Any] = {"project": project, "name": name, "scopes": [s.value for s in scope]}
    if expires_in is not None:
        body["expires_in"] = parse_duration(expires_in)
    created = api(url, token, "POST", "/api/v1/tokens", body)
    if as_json:
        emit_json(created)
        return
    expiry = (
        f"expires {_when(created['expires_at'])} UTC" if created["expires_at"] else "never expires"
    )
    err.print(
        f"token {created['id']} of project {created['project']} "
        f"({', '.join(created['scopes'])}; {expiry}); store it now, it is not shown "
        "again:",
        markup=False,
    )
    console.print(created["token"], markup=False, soft_wrap=True)


@app.command("revoke")
def revoke(
    token_id: Annotated[int, typer.Argument(help="the token's id (cohort token list)")],
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke a token: refused from its next request on, its dashboard sessions ended."""
    revoked = api(url, token, "DELETE", f"/api/v1/tokens/{token_id}")
    if as_json:
        emit_json(revoked)
        return
    console.print(
        f"revoked token {revoked['id']} ({revoked['name']}, project {revoked['project']})",
        markup=False,
    )
