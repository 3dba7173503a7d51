"""Where a client connects and with which token, when the caller does not say.

One file per user, `$XDG_CONFIG_HOME/cohort/config.json` (default `~/.config/cohort/`):
`{"url": ..., "token": ...}`, written by `cohort login` and `cohort up`. `Client()` with
no arguments takes the URL from `COHORT_URL`, else that file, else the local stack's
default address; the token from `COHORT_TOKEN`, else the file's, but only for the file's
own URL: a token saved for one server is never sent to another. The CLI adds the local
stack's own token files to this (cli/user_config.py).

Standard library only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

CONFIG_NAME = "config.json"
# `cohort up`'s address when nothing else is said (the api's COHORT_API_HOST/PORT defaults).
LOCAL_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class Credentials:
    """Where a client connects, with which token, and where that token came from (named
    when the API refuses it)."""

    url: str
    token: str | None
    token_source: str


def config_dir() -> Path:
    """`$XDG_CONFIG_HOME/cohort`, else `~/.config/cohort`."""
    base = os.environ.get("XDG_CONFIG_HOME", "").strip()
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "cohort"


def config_path() -> Path:
    return config_dir() / CONFIG_NAME


def read_config() -> dict[str, str]:
    """The saved URL and token ({} when none, or unreadable)."""
    try:
        data = json.loads(config_path().read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {key: value for key, value in data.items() if isinstance(value, str) and value}


def same_url(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def resolve(url: str | None, token: str | None, default_url: str = LOCAL_URL) -> Credentials:
    """The URL and token to use: the arguments, else the environment, else the user's
    config (its token only for its own URL); `token_source` is "" when there is none."""
    config = read_config()
    target = (url or os.environ.get("COHORT_URL") or config.get("url") or default_url).rstrip("/")
    if token:
        return Credentials(target, token, "the token given")
    if os.environ.get("COHORT_TOKEN"):
        return Credentials(target, os.environ["COHORT_TOKEN"], "COHORT_TOKEN")
    if config.get("token") and same_url(config.get("url", ""), target):
        return Credentials(target, config["token"], f"{config_path()} (cohort login)")
    return Credentials(target, None, "")
