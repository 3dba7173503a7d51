"""`NAME:VERSION` and `NAME@ALIAS`, as the SDK and `cohort model download` read them."""

from __future__ import annotations

import pytest

from cohort.registry import parse_ref


@pytest.mark.parametrize(
    ("ref", "parsed"),
    [
        ("digits:3", ("digits", 3, None)),
        ("digits@production", ("digits", None, "production")),
        ("a.b-c_d:12", ("a.b-c_d", 12, None)),
    ],
)
def test_a_reference_names_a_version_or_an_alias(
    ref: str, parsed: tuple[str, int | None, str | None]
) -> None:
    assert parse_ref(ref) == parsed


@pytest.mark.parametrize(
    "ref", ["digits", "digits:", "digits@", ":3", "@prod", "digits:three", "a:1@b", "a@b:1"]
)
def test_anything_else_is_refused_saying_both_forms(ref: str) -> None:
    with pytest.raises(ValueError, match=r"NAME:VERSION \(digits:3\) or NAME@ALIAS"):
        parse_ref(ref)
