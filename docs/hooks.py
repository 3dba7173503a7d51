"""MkDocs hook: the REST API and CLI reference pages, generated at every build.

`mkdocs.yml` names this file under `hooks:`. At build time it adds two pages that are not
in the repository (nothing generated is committed, so nothing can go stale):

- `reference/rest-api.md`, from the OpenAPI document of the api itself
  (`api.main.create_app().openapi()`): every path and method, its summary, the scope its
  router demands where the document says it, parameters, the request body and the answers;
- `reference/cli.md`, from the Typer app of the `cohort` command (`cli.main:app`), as
  `typer cli.main utils docs --name cohort` renders it.

Run it by hand to see the pages: `.venv/bin/python docs/hooks.py OUT_DIR`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REST_API_PAGE = "reference/rest-api.md"
CLI_PAGE = "reference/cli.md"
METHODS = ("get", "head", "post", "put", "patch", "delete")


def _ref_name(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref", "")
    return ref.rsplit("/", 1)[-1] if ref else ""


def _type_of(schema: dict[str, Any] | None) -> str:
    """A short type for a parameter or body: `integer`, `JobCreate`, `array of string`."""
    if not schema:
        return ""
    if "$ref" in schema:
        return f"[`{_ref_name(schema)}`](#{_anchor(_ref_name(schema))})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_type_of(part) for part in schema[key])
    kind = schema.get("type", "")
    if kind == "array":
        return f"array of {_type_of(schema.get('items'))}"
    if "enum" in schema:
        return " \\| ".join(f"`{value}`" for value in schema["enum"])
    return f"`{kind}`" if kind else "any"


def _anchor(name: str) -> str:
    return "schema-" + name.lower().replace("_", "-").replace(".", "-")


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _operation(path: str, method: str, op: dict[str, Any]) -> list[str]:
    lines = [f"### `{method.upper()} {path}`", ""]
    if op.get("summary"):
        lines += [f"**{op['summary']}**", ""]
    if op.get("description"):
        lines += [op["description"].strip(), ""]
    params = op.get("parameters", [])
    if params:
        lines += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        for p in params:
            lines.append(
                f"| `{p['name']}` | {p.get('in', '')} | {_type_of(p.get('schema'))} | "
                f"{'yes' if p.get('required') else 'no'} | {_cell(p.get('description', ''))} |"
            )
        lines.append("")
    body = op.get("requestBody")
    if body:
        for media, content in body.get("content", {}).items():
            lines += [f"Request body ({media}): {_type_of(content.get('schema'))}", ""]
    responses = op.get("responses", {})
    if responses:
        lines += ["| status | meaning | body |", "|---|---|---|"]
        for status, answer in responses.items():
            schema = next(iter(answer.get("content", {}).values()), {}).get("schema")
            lines.append(
                f"| {status} | {_cell(answer.get('description', ''))} | {_type_of(schema)} |"
            )
        lines.append("")
    security = op.get("security")
    if security:
        schemes = ", ".join(name for entry in security for name in entry)
        lines += [f"Authentication: {schemes}.", ""]
    return lines


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name} {{ #{_anchor(name)} }}", ""]
    if schema.get("description"):
        lines += [schema["description"].strip(), ""]
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    if props:
        lines += [
            "| field | type | required | default | description |",
            "|---|---|---|---|---|",
        ]
        for field, spec in props.items():
            default = f"`{json.dumps(spec['default'])}`" if "default" in spec else ""
            lines.append(
                f"| `{field}` | {_type_of(spec)} | {'yes' if field in required else 'no'} | "
                f"{_cell(default)} | {_cell(spec.get('description', ''))} |"
            )
        lines.append("")
    elif "enum" in schema:
        lines += ["One of: " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".", ""]
    return lines


def rest_api_markdown(document: dict[str, Any]) -> str:
    """The REST API reference page from an OpenAPI document."""
    info = document.get("info", {})
    lines = [
        "# REST API reference",
        "",
        "Generated at build time from the api's own OpenAPI document "
        f"(`api.main.create_app().openapi()`, OpenAPI {document.get('openapi', '')}, "
        f"{info.get('title', '')} {info.get('version', '')}): what the api serves is what "
        "this page lists. A running api serves the same document at `GET /openapi.json` and "
        "Swagger UI at `/docs`. How to authenticate, the job spec and the errors: "
        "[the REST API guide](../api-guide.md).",
        "",
    ]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in document.get("paths", {}).items():
        for method in METHODS:
            if method in item:
                op = item[method]
                tag = (op.get("tags") or ["other"])[0]
                by_tag.setdefault(tag, []).append((path, method, op))
    lines += ["| call | summary |", "|---|---|"]
    for tag in sorted(by_tag):
        for path, method, op in by_tag[tag]:
            lines.append(f"| `{method.upper()} {path}` | {_cell(op.get('summary', ''))} |")
    lines.append("")
    for tag in sorted(by_tag):
        lines += [f"## {tag}", ""]
        for path, method, op in by_tag[tag]:
            lines += _operation(path, method, op)
    schemas = document.get("components", {}).get("schemas", {})
    if schemas:
        lines += ["## Schemas", ""]
        for name in sorted(schemas):
            lines += _schema(name, schemas[name])
    return "\n".join(lines).rstrip() + "\n"


def cli_markdown() -> str:
    """The CLI reference page from the Typer app, as `typer ... utils docs` renders it."""
    import typer
    import typer.cli

    from cli.main import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command)
    body = typer.cli.get_docs_for_click(obj=command, ctx=ctx, name="cohort", title="CLI reference")
    intro = (
        "Generated at build time from the `cohort` command's Typer app (`cli.main:app`), "
        "as `typer cli.main utils docs --name cohort` renders it; `cohort COMMAND --help` "
        "prints the same. Examples and the token's look-up order: "
        "[the CLI guide](../cli-guide.md).\n\n"
    )
    title, _, rest = body.strip().partition("\n")
    return f"{title}\n\n{intro}{rest.lstrip()}\n"


def api_document() -> dict[str, Any]:
    from api.main import create_app

    return create_app().openapi()


def pages() -> dict[str, str]:
    return {REST_API_PAGE: rest_api_markdown(api_document()), CLI_PAGE: cli_markdown()}


def on_files(files: Any, config: Any) -> Any:  # the MkDocs hook
    from mkdocs.structure.files import File

    for uri, content in pages().items():
        files.append(File.generated(config, uri, content=content))
    return files


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "build/docs-pages")
    for uri, content in pages().items():
        target = out / uri
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        sys.stdout.write(f"{target}\n")
