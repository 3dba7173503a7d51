"""Where an API command's URL and token come from (cli/user_config.py): flags, then
COHORT_URL/COHORT_TOKEN, then the per-user config, then the older token file and the local
stack's; and what a refused token's message says."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cli.user_config import config_path, resolve, save_config, save_for_stack
from cohort.errors import ApiError
from cohort.transport import error_of
from services.settings import get_settings


@pytest.fixture(autouse=True)
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user with no config, no COHORT_URL/COHORT_TOKEN and an empty DATA_DIR."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COHORT_DATA_DIR", str(tmp_path / "var"))
    monkeypatch.delenv("COHORT_URL", raising=False)
    monkeypatch.delenv("COHORT_TOKEN", raising=False)
    monkeypatch.delenv("COHORT_API_PORT", raising=False)
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def test_the_config_is_under_xdg_config_home_and_private(user: Path) -> None:
    path = save_config("http://api.example:9000/", "tok-config")
    assert path == user / "xdg" / "cohort" / "config.json" == config_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    found = resolve(None, None)
    assert (found.url, found.token) == ("http://api.example:9000", "tok-config")
    assert found.token_source == f"{path} (cohort login)"


def test_without_xdg_config_home_it_is_under_home(
    user: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert config_path() == user / "home" / ".config" / "cohort" / "config.json"


def test_flags_and_environment_come_before_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    save_config("http://saved:1", "tok-config")
    assert resolve("http://flag:2", "tok-flag").token_source == "--token"
    monkeypatch.setenv("COHORT_TOKEN", "tok-env")
    found = resolve(None, "tok-env")  # typer fills the option from COHORT_TOKEN
    assert (found.url, found.token, found.token_source) == (
        "http://saved:1",
        "tok-env",
        "COHORT_TOKEN",
    )


def test_the_configs_token_goes_to_the_configs_url_only() -> None:
    save_config("http://saved:1", "tok-config")
    found = resolve("http://other:2", None)
    assert found.url == "http://other:2" and found.token is None
    assert resolve("http://saved:1/", None).token == "tok-config"


def test_the_older_token_file_and_the_local_stack_still_count(user: Path) -> None:
    local = user / "var"
    local.mkdir()
    (local / "bootstrap-token").write_text("tok-local\n")
    found = resolve(None, None)
    assert found.token == "tok-local" and found.token_source == str(local / "bootstrap-token")
    assert found.url == "http://127.0.0.1:8000"
    legacy = user / "xdg" / "cohort" / "token"
    legacy.parent.mkdir(parents=True)
    legacy.write_text("tok-legacy")
    assert resolve(None, None).token == "tok-legacy"


def test_cohort_up_says_it_replaced_the_config() -> None:
    save_config("http://127.0.0.1:1", "tok-old")  # nothing answers there
    line = save_for_stack("http://127.0.0.1:8123", "tok-new")
    assert line == f"CLI config: {config_path()} now points at http://127.0.0.1:8123"
    assert resolve(None, None).token == "tok-new"


def test_a_refused_token_says_where_it_came_from_and_what_to_do() -> None:
    error = ApiError(401, {"message": "invalid token"}, "")
    assert str(error) == "HTTP 401: invalid token"
    response = httpx.Response(401, json={"message": "invalid or expired token"})
    refused = error_of(response, "COHORT_TOKEN")
    assert str(refused) == (
        "HTTP 401: invalid or expired token; the token from COHORT_TOKEN was refused: "
        "run `cohort login` (or pass --token / set COHORT_TOKEN)"
    )
    assert "no token was sent: run `cohort login`" in str(error_of(response, ""))
