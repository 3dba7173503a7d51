"""Write cohort/api_models.py, the Python SDK's typed models, from the API's OpenAPI document.

    python deploy/sdk_models.py            # (re)write cohort/api_models.py
    python deploy/sdk_models.py --check    # exit 1 if it differs from what the API says

The models are generated (datamodel-code-generator), not written by hand, so there is one
declaration per shape: the API's pydantic schemas; tests/unit/test_sdk_models.py fails
when the two drift. What goes in is the document's schemas with their descriptions,
titles and validation bounds taken out: a client reads what a server sends, and a newer
server that widens a bound or adds a field (`extra="allow"`) must not break an older
client. The server checks what it is sent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "cohort" / "api_models.py"
BIN = Path(sys.executable).parent
HEADER = (
    '"""The API\'s request and response shapes, generated from its OpenAPI document by\n'
    'deploy/sdk_models.py (do not edit: run `make sdk-models`)."""\n\n'
)
# JSON Schema words that document or bound a value rather than say its type.
DROPPED = {
    "description", "title", "examples", "example", "default_factory",
    "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "pattern", "minItems", "maxItems", "minProperties",
    "maxProperties", "multipleOf", "uniqueItems",
}  # fmt: skip


def _types_only(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _types_only(v) for k, v in node.items() if k not in DROPPED}
    if isinstance(node, list):
        return [_types_only(v) for v in node]
    return node


def schemas_document() -> dict[str, Any]:
    """The API's OpenAPI document reduced to its component schemas' types."""
    from api.main import create_app

    document = create_app().openapi()
    return {
        "openapi": document["openapi"],
        "info": {"title": "Cohort", "version": "1"},
        "paths": {},
        "components": {"schemas": _types_only(document["components"]["schemas"])},
    }


def generate() -> str:
    """The module's text, as datamodel-codegen writes it (formatted by ruff)."""
    with tempfile.TemporaryDirectory() as scratch:
        source, out = Path(scratch) / "openapi.json", Path(scratch) / "models.py"
        source.write_text(json.dumps(schemas_document(), sort_keys=True))
        subprocess.run(
            [
                str(BIN / "datamodel-codegen"),
                *("--input", str(source), "--input-file-type", "openapi"),
                *("--output", str(out), "--output-model-type", "pydantic_v2.BaseModel"),
                *("--target-python-version", "3.11"),
                *("--formatters", "ruff-format", "ruff-check"),
                "--use-standard-collections", "--use-union-operator",
                "--disable-timestamp", "--collapse-root-models",
                "--use-schema-description", "--enum-field-as-literal", "all",
                *("--base-class", "cohort.model_base.ApiModel"),
            ],
            check=True,
            cwd=REPO,
            # Its formatters (ruff) are found on PATH: this interpreter's first.
            env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
        )  # fmt: skip
        body = out.read_text()
    # The generator's own header names a temporary file: ours says where it comes from.
    body = "\n".join(line for line in body.splitlines() if not line.startswith("#")).lstrip()
    return _ruff(HEADER + body.rstrip() + "\n")


def _ruff(text: str) -> str:
    """`text` as the repository's ruff settings sort and format it."""
    ruff = str(BIN / "ruff")
    name = ("--stdin-filename", str(TARGET))
    for args in (["check", "--fix-only", "--quiet", *name, "-"], ["format", *name, "-"]):
        text = subprocess.run(
            [ruff, *args], input=text, capture_output=True, text=True, check=True, cwd=REPO
        ).stdout
    return text


def main() -> int:
    text = generate()
    if "--check" in sys.argv[1:]:
        if TARGET.read_text() != text:
            sys.stderr.write(f"{TARGET} differs from the API's schemas: run `make sdk-models`\n")
            return 1
        return 0
    TARGET.write_text(text)
    sys.stdout.write(f"wrote {TARGET}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
