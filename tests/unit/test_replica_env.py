"""The replica's side of the contract: the variables and directories its process gets,
what a replica never gets (trust zones: it inherits an allow-list of the agent's
environment), how argv[0] is found, and what the agent's policy refuses before anything
runs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from services.wire.replica import ReplicaSpec, StartReplica
from workers import layout
from workers.node.admission import refusal
from workers.node.environment import (
    CommandNotFound,
    ReplicaPaths,
    inherited_env,
    replica_env,
    resolve_argv,
)

REDIS = "redis://secret-host:6379/0"
CONTRACT = {
    "COHORT_JOB_ID",
    "COHORT_NODE_ID",
    "COHORT_NODE_DATA_DIR",
    "COHORT_ATTEMPT",
    "COHORT_REPLICA_INDEX",
    "COHORT_NUM_REPLICAS",
    "COHORT_JOB_DIR",
    "COHORT_WORK_DIR",
    "COHORT_CHECKPOINT_DIR",
    "COHORT_MODEL_DIR",
    "COHORT_TENSORBOARD_DIR",
    "COHORT_INPUT_DIR",
    "COHORT_METRICS_FILE",
    "COHORT_HYPERPARAMETERS",
    "AIP_MODEL_DIR",
    "AIP_CHECKPOINT_DIR",
    "AIP_TENSORBOARD_LOG_DIR",
}
TF_CONFIG = {
    "cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]},
    "task": {"type": "worker", "index": 1},
}


def message(**fields: object) -> StartReplica:
    spec = {
        "job_id": 7,
        "attempt": 2,
        "index": 1,
        "replicas": 2,
        "trainer": None,
        "strategy": "multi_worker_mirrored",
        "command": ["python", "train.py"],
        **fields,
    }
    return StartReplica(
        "n1",
        ReplicaSpec(**spec),
        tf_config=TF_CONFIG,  # type: ignore[arg-type]
        gpu_ids="3",
    )


@pytest.fixture(autouse=True)
def agent_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """What an agent's own environment holds that no user program may see (and nothing
    else: the machine's own variables would blur what is inherited)."""
    for name in list(os.environ):
        monkeypatch.delenv(name)
    for name, value in {
        "COHORT_REDIS_URL": REDIS,
        "COHORT_DATABASE_URL": "postgresql://x",
        "COHORT_BOOTSTRAP_TOKEN": "t0k",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "AWS_ACCESS_KEY_ID": "AK",
        "COHORT_ARTIFACT_URL": "s3://b/p",
        "TF_CONFIG": "{}",
        "AGENT_ONLY_SECRET": "hunter2",
        "HTTPS_PROXY": "http://user:pw@proxy:3128",
        "HOME": "/root",
        "PATH": "/usr/local/bin:/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "NCCL_SOCKET_IFNAME": "eth0",
        "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    }.items():
        monkeypatch.setenv(name, value)


def paths(tmp_path: Path) -> ReplicaPaths:
    return ReplicaPaths.of(tmp_path, 7, 2, 1)


def test_a_command_gets_the_contract_and_no_control_plane_secret(tmp_path: Path) -> None:
    env = replica_env(
        message(env={"MY_FLAG": "on", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"}), paths(tmp_path)
    )
    assert CONTRACT <= env.keys()
    cohort = {name for name in env if name.startswith(("COHORT_", "AIP_"))}
    assert cohort == CONTRACT  # nothing else of Cohort's: no Redis URL, no spec file
    assert REDIS not in env.values() and "s3cr3t" not in env.values()
    assert not any(name.startswith("AWS_") for name in env)
    assert "AGENT_ONLY_SECRET" not in env and "HTTPS_PROXY" not in env
    assert env["MY_FLAG"] == "on"
    assert env["TF_USE_LEGACY_KERAS"] == "1" and env["PYTHONUNBUFFERED"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    # The ids are NVML's (PCI order): CUDA must number them the same way, whatever the job says.
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert json.loads(env["TF_CONFIG"]) == TF_CONFIG


def test_the_contract_names_the_node_layout(tmp_path: Path) -> None:
    env = replica_env(message(), paths(tmp_path))
    job = layout.job_dir(tmp_path, 7)
    work = job / "attempt-2" / "replica-1"
    assert (
        env["COHORT_JOB_ID"],
        env["COHORT_ATTEMPT"],
        env["COHORT_REPLICA_INDEX"],
        env["COHORT_NUM_REPLICAS"],
    ) == ("7", "2", "1", "2")
    assert env["COHORT_JOB_DIR"] == str(job)
    assert env["COHORT_WORK_DIR"] == str(work)
    assert env["COHORT_CHECKPOINT_DIR"] == env["AIP_CHECKPOINT_DIR"] == str(job / "checkpoints")
    assert env["COHORT_MODEL_DIR"] == env["AIP_MODEL_DIR"] == str(job / "model")
    assert (
        env["COHORT_TENSORBOARD_DIR"]
        == env["AIP_TENSORBOARD_LOG_DIR"]
        == str(job / "tensorboard" / "replica-1")
    )
    assert env["COHORT_INPUT_DIR"] == str(job / "inputs")
    assert env["COHORT_METRICS_FILE"] == str(work / "metrics.jsonl")
    assert env["COHORT_HYPERPARAMETERS"] == str(work / "hyperparameters.json")


def test_a_trainer_gets_what_the_runner_needs_and_no_redis(tmp_path: Path) -> None:
    env = replica_env(message(command=None, trainer="mlp_digits"), paths(tmp_path))
    # It reports in its metrics file, which the agent ships: no Redis credentials.
    assert "COHORT_REDIS_URL" not in env and REDIS not in env.values()
    assert env["COHORT_REPLICA_SPEC"] == str(paths(tmp_path).spec_file)
    assert CONTRACT <= env.keys()
    assert "COHORT_DATABASE_URL" not in env and "COHORT_BOOTSTRAP_TOKEN" not in env
    assert not any(name.startswith("AWS_") for name in env)


def test_a_one_replica_job_has_no_tf_config(tmp_path: Path) -> None:
    one = StartReplica("n1", ReplicaSpec(7, 1, 0, 1, None, "one_device", command=["true"]))
    assert "TF_CONFIG" not in replica_env(one, paths(tmp_path))
    assert "TF_GRPC_DEFAULT_OPTIONS" not in replica_env(one, paths(tmp_path))


def test_a_gangs_replicas_dial_a_peer_not_up_yet_again_soon_unless_the_job_says(
    tmp_path: Path,
) -> None:
    env = replica_env(message(), paths(tmp_path))
    assert env["TF_GRPC_DEFAULT_OPTIONS"] == "grpc.initial_reconnect_backoff_ms=50"
    own = "grpc.keepalive_time_ms=30000"
    assert (
        replica_env(message(env={"TF_GRPC_DEFAULT_OPTIONS": own}), paths(tmp_path))[
            "TF_GRPC_DEFAULT_OPTIONS"
        ]
        == own
    )


def test_a_replica_inherits_only_the_allow_listed_variables(tmp_path: Path) -> None:
    env = replica_env(message(), paths(tmp_path))
    inherited = {name for name in env if name not in CONTRACT}
    assert inherited == {
        # the allow-list: programs, libraries, locale, time zone, the node's GPU stack
        "PATH",
        "LANG",
        "LC_ALL",
        "TZ",
        "LD_LIBRARY_PATH",
        "NVIDIA_VISIBLE_DEVICES",
        "TF_CPP_MIN_LOG_LEVEL",
        "NCCL_SOCKET_IFNAME",
        # set by the agent
        "HOME",
        "TMPDIR",
        "TF_CONFIG",
        "TF_GRPC_DEFAULT_OPTIONS",
        "TF_USE_LEGACY_KERAS",
        "PYTHONUNBUFFERED",
        "CUDA_DEVICE_ORDER",
        "CUDA_VISIBLE_DEVICES",
    }
    # HOME is its own work dir, never the agent's; its scratch is the job's.
    assert env["HOME"] == str(paths(tmp_path).work_dir)
    assert env["TMPDIR"] == str(layout.tmp_dir(tmp_path, 7))
    assert env["TF_CONFIG"] != "{}"  # the contract's, never the agent's


def test_a_variable_is_inherited_by_name_or_prefix_only() -> None:
    agent = {
        "PATH": "/bin",
        "LC_CTYPE": "C",
        "CUDA_HOME": "/cuda",
        "XLA_FLAGS": "--x",
        "SECRET": "s",
        "PATHEXT": "x",
        "MY_TF_THING": "x",
        "TF_CONFIG": "{}",
        "TF_TOKEN_app_terraform_io": "t",
        "TF_VAR_password": "p",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "REDIS_PASSWORD": "p",
        "COHORT_SIGNING_KEY": "k",
    }
    assert inherited_env(agent) == {
        "PATH": "/bin",
        "LC_CTYPE": "C",
        "CUDA_HOME": "/cuda",
        "XLA_FLAGS": "--x",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }


def test_python_is_the_replica_interpreter_and_other_names_come_from_path(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin"}
    assert resolve_argv(
        ["python", "train.py", "--steps", "3"], "/opt/py/bin/python", env, tmp_path
    ) == ["/opt/py/bin/python", "train.py", "--steps", "3"]
    assert resolve_argv(["python3", "x.py"], "", env, tmp_path)[0] == sys.executable
    assert resolve_argv(["true"], "", env, tmp_path)[0] in ("/usr/bin/true", "/bin/true")
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    assert resolve_argv(["./run.sh"], "", env, tmp_path) == [str(tmp_path / "./run.sh")]
    with pytest.raises(CommandNotFound, match="command not found: no-such-program"):
        resolve_argv(["no-such-program", "--x"], "", env, tmp_path)
    with pytest.raises(CommandNotFound, match="command not found: ./missing.sh"):
        resolve_argv(["./missing.sh"], "", env, tmp_path)


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"command": None, "trainer": "evil.module:run"}, "not allowed"),
        ({"command": None, "trainer": "no_such_builtin"}, "unknown trainer"),
        ({"env": {"LD_PRELOAD": "/tmp/x.so"}}, "reserved"),
        ({"env": {"COHORT_REDIS_URL": "redis://x"}}, "reserved"),
        ({"env": {"TF_CONFIG": "{}"}}, "reserved"),
        ({"env": {"1BAD": "x"}}, "a name is letters"),
        ({"command": ["python", "a\x00b"]}, "NUL"),
        ({"command": ["x"] * 65}, "at most 64"),
        ({"inputs": {"../escape": "data/1/a.csv"}}, "plain file name"),
        ({"inputs": {"a.csv": "../../etc/passwd"}}, "'..'"),
    ],
)
def test_the_agent_refuses_what_the_api_refuses(fields: dict[str, object], why: str) -> None:
    refused = refusal(message(**fields).spec, allowed_entrypoints=[])
    assert refused is not None and why in refused, refused


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"command": None, "trainer": "mlp_digits"},
        {"command": None, "trainer": "trainer:train", "bundle": "a" * 64},
        {"command": None, "trainer": "listed.mod:fn"},
        {"env": {"MY_VAR": "1"}, "inputs": {"train.csv": "data/3/train.csv"}},
    ],
)
def test_the_agent_runs_what_the_api_accepts(fields: dict[str, object]) -> None:
    assert refusal(message(**fields).spec, allowed_entrypoints=["listed.mod:fn"]) is None


def test_a_scheduled_runs_variables_come_after_the_jobs_own(tmp_path: Path) -> None:
    fire = {
        "COHORT_SCHEDULED_FOR": "2026-06-01T12:00:10Z",
        "COHORT_DATA_VERSION": "sha256:" + "a" * 64,
    }
    # A job's env naming them is refused by the api and the agent (test_the_agent_refuses_
    # what_the_api_refuses); were one to get through, the fire's values still win.
    spoofed = message(env={"COHORT_DATA_VERSION": "sha256:" + "0" * 64}, schedule_env=fire)
    assert refusal(spoofed.spec, []) is not None
    env = replica_env(spoofed, paths(tmp_path))
    assert {name: env[name] for name in fire} == fire
    assert "COHORT_DATA_VERSION" not in replica_env(message(), paths(tmp_path))
