"""The warm pool's rules without processes: its setting as the environment gives it, which
replicas a warm process may serve, and the hand-off's bytes on a real socket pair."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.settings import Settings
from services.wire.replica import ReplicaSpec
from workers import handoff
from workers.node.environment import warm_env, warm_servable


def test_pool_size_comes_from_the_environment_and_is_off_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COHORT_REPLICA_POOL_SIZE", raising=False)
    assert Settings().REPLICA_POOL_SIZE == 0
    monkeypatch.setenv("COHORT_REPLICA_POOL_SIZE", "3")
    assert Settings().REPLICA_POOL_SIZE == 3
    monkeypatch.setenv("COHORT_REPLICA_POOL_SIZE", "-1")
    with pytest.raises(ValidationError, match="REPLICA_POOL_SIZE"):
        Settings()


def spec(**fields: object) -> ReplicaSpec:
    defaults: dict[str, object] = {"trainer": "mlp_digits"}
    return ReplicaSpec(1, 1, 0, 1, strategy="one_device", **{**defaults, **fields})  # type: ignore[arg-type]


def test_only_trainers_without_import_time_variables_are_served_warm() -> None:
    assert warm_servable(spec())
    assert warm_servable(spec(env={"WANDB_MODE": "offline", "MY_TF_SETTING": "1"}))
    assert not warm_servable(spec(trainer=None, command=["python", "train.py"]))
    for name in (
        "TF_CPP_MIN_LOG_LEVEL",
        "TF_USE_LEGACY_KERAS",
        "KERAS_HOME",
        "CUDA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "MALLOC_ARENA_MAX",
        "XLA_FLAGS",
    ):
        assert not warm_servable(spec(env={name: "1"})), name


def test_a_warm_process_is_execd_as_this_agents_replica_with_no_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "store-key")
    monkeypatch.setenv("COHORT_SIGNING_KEY", "agent-only")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
    env = warm_env("node-a", Path("/data"), Path("/pool/home"), Path("/pool/tmp"))
    assert env["COHORT_NODE_ID"] == "node-a" and env["COHORT_AGENT_PID"] == str(os.getpid())
    assert env["COHORT_NODE_DATA_DIR"] == "/data"
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "1"  # the node's own, as a cold replica gets it
    assert "AWS_SECRET_ACCESS_KEY" not in env and "COHORT_SIGNING_KEY" not in env


def test_a_hand_off_carries_its_fields_and_the_log_descriptor() -> None:
    ours, theirs = socket.socketpair()
    sent = handoff.HandOff({"TF_CONFIG": "{}", "BIG": "x" * 300_000}, "/work", 1234, 1234, 0o077)
    read_fd, write_fd = os.pipe()
    try:
        # Bigger than a socket's buffer: sent while the other side reads, as in the agent.
        sender = threading.Thread(target=handoff.send, args=(ours, sent, write_fd))
        sender.start()
        received, log_fd = handoff.receive(theirs)
        sender.join()
        assert received == sent
        os.write(log_fd, b"through the passed descriptor")
        os.close(log_fd)
        assert os.read(read_fd, 100) == b"through the passed descriptor"
        ours.close()
        with pytest.raises(EOFError):
            handoff.receive(theirs)
    finally:
        theirs.close()
        os.close(read_fd)
        os.close(write_fd)


def test_a_malformed_hand_off_is_refused() -> None:
    with pytest.raises(handoff.HandOffError):
        handoff.HandOff.decode(
            b'{"env": {"A": 1}, "cwd": "/", "uid": null, "gid": null, "umask": 63}'
        )
    with pytest.raises(handoff.HandOffError):
        handoff.HandOff.decode(b'{"env": {}, "cwd": "/", "uid": 5, "gid": null, "umask": 63}')
    with pytest.raises(handoff.HandOffError):
        handoff.HandOff.decode(b"not json")
