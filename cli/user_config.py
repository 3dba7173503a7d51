"""The CLI's per-user config, and where an API command's URL and token come from.

One file, `$XDG_CONFIG_HOME/cohort/config.json` (default `~/.config/cohort/`, mode 0600):
`{"url": ..., "token": ...}`, written by `cohort login` (after the API accepted the token)
and by `cohort up` (for the stack it started). Every API command takes, in this order:
- the URL from `--url`, `COHORT_URL`, the config, else the local default
  (`COHORT_API_HOST`:`COHORT_API_PORT`);
- the token from `--token`, `COHORT_TOKEN`, the config (only for the config's own URL:
  a token saved for one server is never sent to another), the older token file
  `~/.config/cohort/token` (read for compatibility), else the local stack's
  `DATA_DIR/bootstrap-token` (a checkout where `cohort up` ran).
The token's source travels with the client, so that a 401 can say which token was refused
and how to fix it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx

from cohort.config import Credentials, config_dir, config_path, read_config, same_url
from services.data_dir import write_private
from services.settings import get_settings

__all__ = ["Credentials", "config_dir", "config_path", "read_config", "resolve", "save_config"]

LEGACY_TOKEN_NAME = "token"


def save_config(url: str, token: str) -> Path:
    """Save the URL and token as the user's default (0600, in a 0700 directory)."""
    directory = config_dir()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = config_path()
    write_private(path, json.dumps({"url": url.rstrip("/"), "token": token}, indent=2) + "\n")
    return path


def local_url() -> str:
    settings = get_settings()
    return f"http://{settings.API_HOST}:{settings.API_PORT}"


def _file_token(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def resolve(url: str | None, token: str | None) -> Credentials:
    """The URL and token of an API command: `url` and `token` are its options' values
    (typer fills them from COHORT_URL and COHORT_TOKEN when the flags are absent)."""
    config = read_config()
    target = (url or config.get("url") or local_url()).rstrip("/")
    if token:
        source = "COHORT_TOKEN" if token == os.environ.get("COHORT_TOKEN") else "--token"
        return Credentials(target, token, source)
    if config.get("token") and same_url(config.get("url", ""), target):
        return Credentials(target, config["token"], f"{config_path()} (cohort login)")
    # DATA_DIR as a path only: `Settings.data_dir` would create it (and fix its modes)
    # wherever the command runs, / included.
    local = get_settings().DATA_DIR.expanduser().resolve() / "bootstrap-token"
    for path in (config_dir() / LEGACY_TOKEN_NAME, local):
        found = _file_token(path)
        if found:
            return Credentials(target, found, str(path))
    return Credentials(target, None, "")


def save_for_stack(url: str, token: str) -> str:
    """`cohort up`'s config: always the stack it started; the line to print says so, and
    names the live stack the config pointed at before, if any."""
    before = read_config().get("url", "")
    path = save_config(url, token)
    line = f"CLI config: {path} now points at {url}"
    if before and not same_url(before, url) and _answers(before):
        line += f" (it pointed at {before}, which is running: `cohort login --url {before}`)"
    return line


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url.rstrip('/')}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False
