"""A job's requirements: the lines its `pip:` field or its bundle's requirements.txt gives,
checked and normalised once, and the digest that names the environment built from them.

The api checks them at submission (a 422 naming the line and the fix); the normalised
lines travel in the replica spec (services/wire/replica.py) and the agent builds one
virtualenv per (replica interpreter, `requirements_digest`) from them
(workers/node/envs.py). Pure: `packaging` parses each requirement, nothing runs pip.

Refused: pip's options other than `--hash` and `--require-hashes` (an index, `-e`, `-r`,
`-c`: the node's pip settings choose where packages come from), URLs and paths (a
replica never needs the network, nor a file the node lacks, at run time), and a
requirement that would replace what the node runs every gang with: TensorFlow, Keras,
tf-keras or Cohort's own package (`PROTECTED`).
"""

from __future__ import annotations

import hashlib
import re

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

# Cohort's own distribution ([project] name in pyproject.toml; a unit test checks it).
COHORT_DISTRIBUTION = "cohort"
# What every replica of a gang must share with its peers and its node: a different
# TensorFlow (or Keras, which it builds models with) breaks the gang's collectives.
PROTECTED = frozenset(
    {
        "tensorflow",
        "tensorflow-cpu",
        "tensorflow-gpu",
        "tensorflow-intel",
        "tensorflow-macos",
        "tensorflow-aarch64",
        "tf-nightly",
        "tf-nightly-cpu",
        "tf-nightly-gpu",
        "tf-keras",
        "tf-keras-nightly",
        "keras",
        "keras-nightly",
        COHORT_DISTRIBUTION,
    }
)
REQUIRE_HASHES = "--require-hashes"
MAX_REQUIREMENTS = 500
MAX_LINE = 2000
_HASH = re.compile(r"^--hash[= ](?P<value>(sha256|sha384|sha512):[0-9a-fA-F]{64,128})$")
_FIX = "give requirements such as 'tabulate==0.9.0' (the node's pip settings choose the index)"


class RequirementRefused(ValueError):
    """A requirement line Cohort will not install; the message names it and the fix."""


def _logical_lines(text_lines: list[str]) -> list[tuple[int, str]]:
    """(1-based line number, text) of each requirement line: comments and blank lines
    dropped, backslash continuations joined."""
    found: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text_lines, start=1):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            found.append((start, line))
    if pending.strip():
        found.append((start, pending.strip()))
    return found


def _one(line: str, where: str) -> str:
    """The normalised form of one requirement line (its hashes sorted), or refused."""
    if len(line) > MAX_LINE:
        raise RequirementRefused(f"{where} is longer than {MAX_LINE} characters: shorten it")
    spec, _, options = line.partition(" --")
    options = f"--{options}" if options else ""
    if spec.startswith("-"):
        option = spec.split()[0].split("=")[0]
        raise RequirementRefused(
            f"{where}: pip option {option!r} is not allowed (only --hash and "
            f"--require-hashes are): {_FIX}"
        )
    hashes = []
    for option in filter(None, re.split(r"\s+(?=--)", options)):
        match = _HASH.match(option.strip())
        if match is None:
            raise RequirementRefused(
                f"{where}: pip option {option.split()[0].split('=')[0]!r} is not allowed "
                f"(only --hash=sha256:<hex> after a requirement): {_FIX}"
            )
        hashes.append(f"--hash={match['value'].lower()}")
    if "://" in spec or spec.startswith((".", "/", "~", "file:")):
        raise RequirementRefused(
            f"{where}: {spec!r} is a URL or a path: replicas install from the node's "
            f"index only; {_FIX}"
        )
    try:
        requirement = Requirement(spec)
    except InvalidRequirement as exc:
        said = str(exc).splitlines()[0]
        raise RequirementRefused(
            f"{where}: {spec!r} is not a requirement ({said}): {_FIX}"
        ) from None
    if requirement.url:
        raise RequirementRefused(
            f"{where}: {spec!r} names a URL: replicas install from the node's index only; {_FIX}"
        )
    if canonicalize_name(requirement.name) in PROTECTED:
        raise RequirementRefused(
            f"{where}: {requirement.name!r} is refused: a different TensorFlow, Keras or "
            "Cohort breaks the gang's collectives, so the node's is used; remove the line "
            "(the node's version is what your code imports)"
        )
    return " ".join([str(requirement), *sorted(hashes)])


def normalise_requirements(
    text_lines: list[str], source: str, *, indexed: bool = False
) -> list[str]:
    """The requirement lines of `text_lines` (as a requirements.txt holds them), checked
    and normalised: sorted, each once, `--require-hashes` first when given. `source`
    names where they came from in a refusal: "requirements.txt line 3", or with
    `indexed` (a list field) "pip[2]".

    Raises:
        RequirementRefused: a line is not a plain requirement, names a URL or a path,
            carries a pip option other than --hash/--require-hashes, or names a
            protected package (the message names the line and the fix).
    """
    lines: set[str] = set()
    require_hashes = False
    logical = _logical_lines(text_lines)
    if len(logical) > MAX_REQUIREMENTS:
        raise RequirementRefused(
            f"{source} holds {len(logical)} requirements, more than {MAX_REQUIREMENTS}: "
            "give fewer (their own dependencies are installed with them)"
        )
    for number, line in logical:
        if line == REQUIRE_HASHES:
            require_hashes = True
            continue
        where = f"{source}[{number - 1}]" if indexed else f"{source} line {number}"
        lines.add(_one(line, where))
    return ([REQUIRE_HASHES] if require_hashes and lines else []) + sorted(lines)


def package_count(lines: list[str]) -> int:
    """How many packages the normalised `lines` name (not counting --require-hashes)."""
    return sum(1 for line in lines if line != REQUIRE_HASHES)


def requirements_digest(lines: list[str]) -> str:
    """The sha256 (hex) of the normalised lines: what names the environment built from
    them; "" for none (the node's interpreter as it is)."""
    if not lines:
        return ""
    return hashlib.sha256(("\n".join(lines) + "\n").encode()).hexdigest()
