"""Token scopes: what each lets a token do, and the one check every request goes through
(api/deps.py applies it per router: reads need one scope, writes another)."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING

from services.exceptions import Forbidden

if TYPE_CHECKING:  # the CLI imports the scopes without SQLAlchemy's models
    from services.models import ApiToken


class Scope(StrEnum):
    READ = "read"
    SUBMIT = "submit"
    SCHEDULES = "schedules"
    ADMIN = "admin"


# What a scope lets a token do, as the 403 and `cohort token create --help` say it.
GRANTS: dict[Scope, str] = {
    Scope.READ: "read the project's jobs, metrics, logs, streams, artifacts, data, sweeps, "
    "schedules and the nodes, and use the dashboard",
    Scope.SUBMIT: "submit and cancel jobs and sweeps and upload code bundles and data",
    Scope.SCHEDULES: "create, change, pause, trigger and delete retraining schedules",
    Scope.ADMIN: "do everything the other scopes allow in its own project, and manage "
    "every project's tokens, quotas and nodes",
}


def holds(granted: Iterable[str], needed: Scope) -> bool:
    """Whether scopes `granted` allow what `needed` does: `admin` allows everything, any
    other scope only itself (a `submit` token cannot read unless it also has `read`)."""
    have = set(granted)
    return needed in have or Scope.ADMIN in have


def check_scope(token: ApiToken, needed: Scope) -> None:
    """Raise Forbidden, naming the missing scope and how to get it, unless `token` holds
    `needed`."""
    if holds(token.scopes, needed):
        return
    project = token.project.name
    raise Forbidden(
        f"token {token.name!r} (project {project}) lacks the {needed.value!r} scope, needed "
        f"to {GRANTS[needed]}; it has {', '.join(token.scopes) or 'none'}. Ask an admin "
        f"for a token with it: cohort token create --project {project} --name NAME "
        f"--scope {needed.value}",
        needed.value,
    )
