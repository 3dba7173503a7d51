"""The SDK's typed models are the API's: cohort/api_models.py is what deploy/sdk_models.py
generates from the API's OpenAPI document now (a schema changed without `make sdk-models`
fails here), and every call the SDK declares answers with a model of that document."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

from cohort import api_models, calls
from cohort.events import TERMINAL
from services.statuses import TERMINAL_STATUSES

REPO = Path(__file__).resolve().parents[2]


def test_the_models_are_what_the_openapi_document_generates() -> None:
    result = subprocess.run(
        [sys.executable, "deploy/sdk_models.py", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_schema_of_the_document_has_its_model() -> None:
    from api.main import create_app

    schemas = create_app().openapi()["components"]["schemas"]
    models = {
        name
        for name, value in vars(api_models).items()
        if isinstance(value, type) and issubclass(value, api_models.ApiModel)
    }
    # Enums and plain aliases are inlined as Literal types; every object schema is a class.
    objects = {name for name, schema in schemas.items() if schema.get("type") == "object"}
    assert objects <= models, sorted(objects - models)
    for name in objects:
        fields = set(getattr(api_models, name).model_fields)
        assert fields == set(schemas[name].get("properties", {})), name


def test_each_call_answers_with_a_model_of_the_document() -> None:
    answered = {}
    for name, fn in vars(calls).items():
        if name.startswith("_") or getattr(fn, "__module__", "") != "cohort.calls":
            continue
        hint = typing.get_type_hints(fn).get("return") if callable(fn) else None
        if typing.get_origin(hint) is calls.Call:
            answered[name] = hint
    assert len(answered) >= 20
    for name, hint in answered.items():
        (inner,) = typing.get_args(hint)
        model = typing.get_args(inner)[0] if typing.get_origin(inner) is list else inner
        assert model is type(None) or model.__module__ == "cohort.api_models", (name, model)


def test_the_sdk_knows_the_terminal_statuses_the_server_does() -> None:
    assert TERMINAL == {str(status) for status in TERMINAL_STATUSES}


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys; print(' '.join(sys.modules))"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {name.split(".")[0] for name in out.split()}


def test_report_in_a_replica_loads_the_standard_library_alone() -> None:
    loaded = _modules_after("import cohort\nfrom cohort import report")
    assert not loaded & {"httpx", "pydantic", "yaml", "pathspec", "cli", "services"}


def test_the_sdk_loads_no_server_database_or_tensorflow() -> None:
    loaded = _modules_after("from cohort import Client, AsyncClient, Job")
    assert "httpx" in loaded  # the SDK did load
    heavy = {"fastapi", "starlette", "sqlalchemy", "tensorflow", "celery", "redis", "services"}
    assert not loaded & heavy, loaded & heavy
