"""`cohort data push | ls | rm`, run as the installed command against a real api process
(PostgreSQL; a directory store and a real S3 server), and a job naming the data it pushed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from cohort.client import Client
from services.storage import keys
from services.storage.store import open_store

# The api process and the user's shell around it, on a directory store and on S3.
from tests.e2e.test_code_cli import api, cohort  # noqa: F401 - `api` is a fixture

CSV = b"p0,p1,label\n0.1,0.2,3\n0.5,0.0,7\n"


def test_push_list_use_and_remove_data(
    api: tuple[Client, dict[str, str]],  # noqa: F811
    tmp_path: Path,
) -> None:
    client, env = api
    source = tmp_path / "digits.csv"
    source.write_bytes(CSV)
    pushed = cohort(env, "data", "push", str(source), "digits/train.csv")
    assert pushed.returncode == 0, pushed.stderr
    assert "data/digits/train.csv" in pushed.stdout
    # The bytes are in the store, under this project's prefix, where the job's nodes look.
    [(key, size)] = open_store().list(keys.DATA_PREFIX)
    assert key == keys.data_key(int(key.split("/")[1]), "digits/train.csv") and size == len(CSV)
    with open_store().open_read(key) as handle:
        assert handle.read() == CSV

    listed = cohort(env, "data", "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [
        {"path": "digits/train.csv", "size": len(CSV), "sha256": None}
    ]
    assert "digits/train.csv" in cohort(env, "data", "ls").stdout

    spec = tmp_path / "job.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "reader",
                "command": ["python", "train.py"],
                "replicas": 1,
                "strategy": "one_device",
                "inputs": {"train.csv": "data/digits/train.csv"},
            }
        )
    )
    submitted = cohort(env, "submit", str(spec), "--json")
    assert submitted.returncode == 0, submitted.stderr
    job = client.job(json.loads(submitted.stdout)["id"])
    assert job["inputs"] == {"train.csv": "data/digits/train.csv"}

    removed = cohort(env, "data", "rm", "digits/train.csv")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(cohort(env, "data", "ls", "--json").stdout) == []
    # Gone now: a job naming it is refused, naming the file and the fix.
    refused = cohort(env, "submit", str(spec))
    assert refused.returncode == 2
    assert "digits/train.csv" in refused.stderr and "cohort data push" in refused.stderr
    again = cohort(env, "data", "rm", "digits/train.csv")
    assert again.returncode == 2 and "not found" in again.stderr


def test_refusals_are_reported_and_nothing_is_stored(
    api: tuple[Client, dict[str, str]],  # noqa: F811
    tmp_path: Path,
) -> None:
    _, env = api
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(4096))
    stored = cohort(env, "data", "push", str(source), "big.bin")
    assert stored.returncode == 0, stored.stderr
    for path, words in [("a\\b.csv", "backslash"), ("big.bin/x", "is a file")]:
        refused = cohort(env, "data", "push", str(source), path)
        assert refused.returncode == 2, (path, refused.stdout)
        assert words in refused.stderr.replace("\n", " "), (path, refused.stderr)
    missing = cohort(env, "data", "push", str(tmp_path / "nowhere.csv"), "x.csv")
    assert missing.returncode == 2 and "nowhere.csv" in missing.stderr
    assert [item["path"] for item in json.loads(cohort(env, "data", "ls", "--json").stdout)] == [
        "big.bin"
    ]
