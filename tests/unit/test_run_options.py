"""`cohort run`'s command line as a spec: `--set` pairs, the default name and code."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from cli.run import default_code, default_name, parse_sets, script_of


def test_sets_nest_by_dots_and_read_values_as_yaml() -> None:
    assert parse_sets(
        [
            "replicas=2",
            "restart_policy=never",
            "hyperparameters.learning_rate=0.1",
            "hyperparameters.layers=[64, 32]",
            "hyperparameters.epochs=3",
            "profile.steps=[10, 15]",
            "placement=",
            "distribution.mixed_precision=mixed_float16",
        ]
    ) == {
        "replicas": 2,
        "restart_policy": "never",
        "hyperparameters": {"learning_rate": 0.1, "layers": [64, 32], "epochs": 3},
        "profile": {"steps": [10, 15]},
        "placement": None,
        "distribution": {"mixed_precision": "mixed_float16"},
    }


def test_text_fields_stay_as_written() -> None:
    assert parse_sets(
        ["name=2024", "env.RETRIES=3", "env.URL=http://x:1/a=b", "inputs.t.csv=data/t.csv"]
    ) == {
        "name": "2024",
        "env": {"RETRIES": "3", "URL": "http://x:1/a=b"},
        "inputs": {"t.csv": "data/t.csv"},
    }


def test_a_later_set_wins_and_unknown_keys_go_to_the_server() -> None:
    assert parse_sets(["replicas=1", "replicas=3", "replica=2"]) == {"replicas": 3, "replica": 2}


@pytest.mark.parametrize(
    "pairs", [["replicas"], ["=2"], ["a..b=1"], ["roles=1", "roles.ps=1"]], ids=str
)
def test_malformed_pairs_are_refused(pairs: list[str]) -> None:
    with pytest.raises(typer.BadParameter):
        parse_sets(pairs)


@pytest.mark.parametrize(
    ("command", "script", "name"),
    [
        (["python", "train.py", "--lr", "0.1"], "train.py", "train"),
        (["python3.11", "-u", "src/fit.py"], "src/fit.py", "fit"),
        (["/usr/bin/python3", "-W", "ignore", "train.py"], "train.py", "train"),
        (["python", "-m", "pkg.train"], None, "train"),
        (["python", "-c", "print(1)"], None, "python"),
        (["./run.sh", "x"], None, "run.sh"),
        (["python", "my script!.py"], "my script!.py", "my script-"),
    ],
)
def test_the_script_and_the_default_name(command: list[str], script: str | None, name: str) -> None:
    assert script_of(command) == script
    assert default_name(command) == name


def test_the_code_defaults_to_here_only_when_the_script_is_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    assert default_code(["python", "train.py"]) == Path(".")
    assert default_code(["python", "other.py"]) is None
    assert default_code(["python", str(tmp_path / "train.py")]) is None  # absolute: as is
    assert default_code(["python", "-m", "train"]) is None
