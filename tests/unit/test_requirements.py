"""A job's requirement lines (services/wire/requirements.py): what is installed, in which
normal form, and what is refused with the line and the fix named."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from services.wire.requirements import (
    COHORT_DISTRIBUTION,
    REQUIRE_HASHES,
    RequirementRefused,
    normalise_requirements,
    package_count,
    requirements_digest,
)

HASH = "sha256:" + "ab" * 32


def test_lines_are_normalised_sorted_and_kept_once() -> None:
    text = [
        "# the job's packages",
        "",
        "tabulate == 0.9.0  # tables",
        "Humanize>=4",
        "tabulate==0.9.0",
    ]
    assert normalise_requirements(text, "requirements.txt") == ["Humanize>=4", "tabulate==0.9.0"]


def test_continuations_markers_and_extras_are_requirements_too() -> None:
    text = ["requests[socks] >= 2 \\", "  ; python_version >= '3.8'"]
    (line,) = normalise_requirements(text, "requirements.txt")
    assert line.startswith("requests[socks]>=2") and "python_version" in line


def test_hashes_and_require_hashes_are_honoured() -> None:
    text = [REQUIRE_HASHES, f"tabulate==0.9.0 --hash={HASH.upper().replace('SHA256', 'sha256')}"]
    lines = normalise_requirements(text, "requirements.txt")
    assert lines == [REQUIRE_HASHES, f"tabulate==0.9.0 --hash={HASH}"]
    assert package_count(lines) == 1


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("-e .", "pip option '-e' is not allowed"),
        ("--index-url https://example.org/simple", "pip option '--index-url'"),
        ("-r other.txt", "pip option '-r'"),
        ("tabulate --no-deps", "pip option '--no-deps'"),
        ("git+https://example.org/pkg.git", "is a URL or a path"),
        ("file:///srv/pkg.whl", "is a URL or a path"),
        ("./vendor/pkg", "is a URL or a path"),
        ("pkg @ https://example.org/pkg.whl", "is a URL or a path"),
        ("not a requirement!", "is not a requirement"),
    ],
)
def test_pip_options_urls_and_paths_are_refused_naming_the_line(line: str, said: str) -> None:
    with pytest.raises(RequirementRefused) as caught:
        normalise_requirements(["tabulate==0.9.0", line], "requirements.txt")
    message = str(caught.value)
    assert message.startswith("requirements.txt line 2:") and said in message
    assert "tabulate==0.9.0" in message  # the fix: what a line looks like


@pytest.mark.parametrize(
    "name",
    [
        "tensorflow==2.15",
        "TensorFlow-CPU",
        "tensorflow_gpu",
        "tf-keras",
        "tf_keras",
        "keras>=3",
        "cohort",
    ],
)
def test_what_the_gang_shares_with_its_node_is_refused(name: str) -> None:
    with pytest.raises(RequirementRefused, match="breaks the gang's collectives") as caught:
        normalise_requirements([name], "pip", indexed=True)
    assert str(caught.value).startswith("pip[0]:")


def test_packages_named_like_tensorflow_are_not_refused() -> None:
    # tensorflow-datasets is what a job most often brings; only TensorFlow itself is the node's.
    assert normalise_requirements(["tensorflow-datasets==4.9.4"], "pip") == [
        "tensorflow-datasets==4.9.4"
    ]


def test_cohorts_own_distribution_name_is_the_one_refused() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["name"] == COHORT_DISTRIBUTION


def test_the_digest_names_the_normalised_set() -> None:
    one = normalise_requirements(["b==1", "a==2"], "pip")
    other = normalise_requirements(["a == 2", "b==1", "# same"], "requirements.txt")
    assert requirements_digest(one) == requirements_digest(other) != requirements_digest(["a==2"])
    assert requirements_digest([]) == ""
