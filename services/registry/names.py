"""What a model or alias may be called, and how a reference names a version of a model:
`NAME:VERSION` (a number) or `NAME@ALIAS`. Neither name may hold ':' or '@', and an alias
starts with a letter, so a reference never reads two ways."""

from __future__ import annotations

import re

from services.exceptions import InvalidRegistryRequest

# The alias a schedule's promotions move unless its `promote.alias` names another.
DEFAULT_ALIAS = "production"
MODEL_NAME = re.compile(r"[A-Za-z0-9][\w.\-]{0,63}")
ALIAS_NAME = re.compile(r"[A-Za-z][\w\-]{0,63}")
MODEL_NAME_RULE = "1-64 characters: a letter or digit, then letters, digits, '.', '_', '-'"
ALIAS_NAME_RULE = "1-64 characters: a letter, then letters, digits, '_', '-'"


def check_model_name(name: str, field: str = "name") -> str:
    """`name` if it can name a model.

    Raises:
        InvalidRegistryRequest: naming `field` and the rule.
    """
    if not MODEL_NAME.fullmatch(name):
        raise InvalidRegistryRequest(
            field, f"{name[:80]!r} is not a model name: use {MODEL_NAME_RULE}"
        )
    return name


def check_alias_name(alias: str, field: str = "alias") -> str:
    """`alias` if it can name an alias.

    Raises:
        InvalidRegistryRequest: naming `field` and the rule.
    """
    if not ALIAS_NAME.fullmatch(alias):
        raise InvalidRegistryRequest(
            field, f"{alias[:80]!r} is not an alias name: use {ALIAS_NAME_RULE}"
        )
    return alias


def actor(kind: str, name: str, ident: int) -> str:
    """Who registered a version or moved an alias, as the registry records it: a token or
    a schedule, by name and id (a name may be reused once the first is revoked or gone)."""
    return f"{kind} {name} (id {ident})"
