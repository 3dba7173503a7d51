"""The warm pool's rules without processes: its setting as the environment gives it, which
replicas a warm process may serve, and the hand-off's bytes on a real socket pair."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.settings import Settings
from services.wire.replica import ReplicaSpec
from workers import handoff, python_args
from workers.node import guard
from workers.node.environment import warm_env, warm_servable
from workers.node.pool_size import PoolSize, private_bytes
from workers.replica import parent_watch


def test_pool_size_comes_from_the_environment_and_is_auto_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COHORT_REPLICA_POOL_SIZE", raising=False)
    assert Settings().REPLICA_POOL_SIZE == "auto"
    assert Settings().REPLICA_POOL_MEMORY == 1024**3
    monkeypatch.setenv("COHORT_REPLICA_POOL_SIZE", "3")
    assert Settings().REPLICA_POOL_SIZE == 3
    monkeypatch.setenv("COHORT_REPLICA_POOL_SIZE", "-1")
    with pytest.raises(ValidationError, match="REPLICA_POOL_SIZE"):
        Settings()


def spec(**fields: object) -> ReplicaSpec:
    defaults: dict[str, object] = {"trainer": "mlp_digits"}
    return ReplicaSpec(1, 1, 0, 1, strategy="one_device", **{**defaults, **fields})  # type: ignore[arg-type]


def test_trainers_and_python_programs_without_import_time_variables_are_served_warm() -> None:
    assert warm_servable(spec())
    assert warm_servable(spec(env={"WANDB_MODE": "offline", "MY_TF_SETTING": "1"}))
    for command in (
        ["python", "train.py"],
        ["python3", "-u", "train.py", "--lr", "-1"],
        ["python", "-m", "pkg.train", "-m", "x"],
    ):
        assert warm_servable(spec(trainer=None, command=command)), command
    for command in (
        ["python"],  # the interactive interpreter
        ["python", "-c", "pass"],
        ["python", "-"],
        ["python", "-O", "train.py"],  # changes the interpreter itself
        ["python", "-X", "dev", "train.py"],
        ["python", "-m"],
        ["python", "-m", "not a module"],
        ["bash", "train.sh"],
        ["./python", "train.py"],  # a program of that name, not the node's interpreter
        ["/usr/bin/python3", "train.py"],
    ):
        assert not warm_servable(spec(trainer=None, command=command)), command
    assert not warm_servable(spec(trainer=None, command=["python", "t.py"], requirements=["x"]))
    assert not warm_servable(
        spec(trainer=None, command=["python", "t.py"], env={"PYTHONPATH": "."})
    )
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
    sent = handoff.HandOff(
        {"TF_CONFIG": "{}", "BIG": "x" * 300_000},
        "/work",
        1234,
        1234,
        0o077,
        program=["-m", "pkg.train", "--lr", "1"],
    )
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


def test_what_a_fresh_interpreter_puts_first_on_sys_path(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "train.py").write_text("")
    (tmp_path / "link.py").symlink_to(tmp_path / "real" / "train.py")
    script = python_args.parse(["link.py", "--x"])
    module = python_args.parse(["-u", "-m", "pkg.train", "a"])
    assert script is not None and module is not None
    assert (script.script, script.module, script.args) == ("link.py", None, ["--x"])
    assert (module.script, module.module, module.args) == (None, "pkg.train", ["a"])
    assert script.path0(tmp_path) == tmp_path / "real"  # the link resolved, as Python does
    assert module.path0(tmp_path) == tmp_path


def test_a_directory_that_would_shadow_a_preloaded_module_is_found(tmp_path: Path) -> None:
    for name in ("numpy.py", "google", "fast.cpython-311-x86_64-linux-gnu.so", "old.pyc"):
        (tmp_path / name).mkdir() if "." not in name else (tmp_path / name).write_text("")
    (tmp_path / "notes.txt").write_text("")
    offered = python_args.module_names(tmp_path)
    assert offered == {"numpy", "google", "fast", "old"}
    preloaded = frozenset({"tensorflow", "numpy", "google"})
    assert python_args.shadowed(offered, preloaded)
    assert not python_args.shadowed({"train", "data"}, preloaded)
    assert python_args.shadowed(python_args.module_names(tmp_path / "missing"), preloaded)


def test_ready_carries_the_preloaded_module_names() -> None:
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(handoff.ready_message(["numpy", "tensorflow"]))
        assert ours.recv(1) == handoff.READY
        assert handoff.receive_preloaded(ours) == {"numpy", "tensorflow"}
        theirs.sendall(handoff.READY + b"\x00\x00\x00\x05[1,2]")
        ours.recv(1)
        with pytest.raises(handoff.HandOffError):
            handoff.receive_preloaded(ours)
    finally:
        ours.close()
        theirs.close()


def test_a_malformed_hand_off_is_refused() -> None:
    with pytest.raises(handoff.HandOffError):
        handoff.HandOff.decode(
            b'{"env": {"A": 1}, "cwd": "/", "uid": null, "gid": null, "umask": 63}'
        )
    with pytest.raises(handoff.HandOffError):
        handoff.HandOff.decode(b'{"env": {}, "cwd": "/", "uid": 5, "gid": null, "umask": 63}')
    with pytest.raises(handoff.HandOffError):
        handoff.HandOff.decode(b"not json")
    with pytest.raises(handoff.HandOffError):
        handoff.HandOff.decode(
            b'{"env": {}, "cwd": "/", "uid": null, "gid": null, "umask": 63, "program": [1]}'
        )


def test_a_warm_commands_watcher_gives_the_guards_grace() -> None:
    assert parent_watch.GUARD_GRACE == guard.GRACE_SECONDS


def test_an_auto_pool_keeps_one_per_free_slot_within_its_memory() -> None:
    free = [4]
    size = PoolSize(None, lambda: free[0], memory=1000 * 2**20)
    assert not size.off and size.target() == 3  # 1000 MiB of ~300 MiB processes
    size.process_bytes = 200 * 2**20  # as measured on a ready one
    assert size.target() == 4
    free[0] = 1
    assert size.target() == 1
    free[0] = -1  # more replicas than slots (a GPU node's): none, never negative
    assert size.target() == 0
    assert PoolSize(None, lambda: 4, memory=100 * 2**20).off  # no room for one
    assert PoolSize(0).off and PoolSize(2, lambda: 0).target() == 2  # fixed: as given


def test_a_processes_own_memory_is_read_from_proc() -> None:
    mine = private_bytes(os.getpid())
    assert 10 * 2**20 < mine < 4 * 2**30  # this interpreter and pytest
    assert private_bytes(2**22 + 1) == 0  # no such process


def test_a_process_is_measured_by_what_it_wrote_not_by_the_files_it_read(
    tmp_path: Path,
) -> None:
    # A file read through a mapping stays the page cache's (shared with any process that
    # maps it: a warm process's TensorFlow libraries), though the kernel counts it
    # "private clean" while no other process maps it; what the process wrote is its own.
    shared = tmp_path / "library"
    with shared.open("wb") as handle:
        handle.write(os.urandom(64 * 2**20))
        handle.flush()
        os.fsync(handle.fileno())  # on disk: its cached pages clean, as a library's are
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import mmap, sys
                with open({str(shared)!r}, "rb") as handle:
                    mapped = mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ)
                total = sum(mapped[i] for i in range(0, len(mapped), 4096))  # read all
                written = bytearray(48 * 2**20)
                for i in range(0, len(written), 4096):
                    written[i] = 1
                print("ready", flush=True)
                sys.stdin.read()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        measured = private_bytes(child.pid)
    finally:
        child.communicate("")
    assert 48 * 2**20 <= measured < (48 + 40) * 2**20, measured / 2**20
