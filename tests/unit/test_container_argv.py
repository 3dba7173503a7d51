"""The engine's `run` argv of an image job's replica, built by one pure function
(workers/node/containers.py `run_argv`): the process contract as options, never a shell,
no value of a variable on the command line, and the engine's own GPU options."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.wire.replica import ReplicaSpec, StartReplica
from workers.layout import ReplicaPaths
from workers.node import containers
from workers.node.environment import replica_env

DATA = Path("/var/lib/cohort")
TF_CONFIG = {"cluster": {"worker": ["10.0.0.1:29500", "10.0.0.2:29500"]}, "task": {"index": 1}}


def message(gpu_ids: str = "", **spec: object) -> StartReplica:
    fields: dict[str, object] = {
        "job_id": 7,
        "attempt": 2,
        "index": 1,
        "replicas": 2,
        "trainer": None,
        "command": ["python", "train.py", "--steps", "5"],
        "strategy": "multi_worker_mirrored",
        "image": "localhost/team-tf:1",
        "env": {"SECRET_TOKEN": "s3cr3t"},
        **spec,
    }
    return StartReplica("node-a", ReplicaSpec(**fields), TF_CONFIG, 29500, gpu_ids)  # type: ignore[arg-type]


def argv_of(start: StartReplica, engine: str = "/usr/bin/docker") -> list[str]:
    paths = ReplicaPaths.of(DATA, 7, 2, 1)
    return containers.run_argv(
        engine=engine,
        spec=start.spec,
        name="cohort-node-a-7-2-1-abcd",
        labels=containers.marks("node-a", DATA),
        env=replica_env(start, paths, container=True),
        job_dir=paths.job_dir,
        workdir=paths.work_dir,
        uid=1879048199,
        gid=1879048199,
        gpu_ids=start.gpu_ids,
    )


def options(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == flag]


def test_the_argv_runs_the_command_as_the_jobs_user_on_the_hosts_network() -> None:
    argv = argv_of(message())
    assert argv[:4] == ["/usr/bin/docker", "run", "--rm", "--init"]
    assert options(argv, "--name") == ["cohort-node-a-7-2-1-abcd"]
    assert options(argv, "--network") == ["host"]
    assert options(argv, "--user") == ["1879048199:1879048199"]
    assert options(argv, "--workdir") == [str(DATA / "jobs/7/attempt-2/replica-1")]
    assert "--no-healthcheck" in argv and options(argv, "--cap-drop") == ["ALL"]
    assert options(argv, "--log-driver") == ["none"]  # the log is the client's output
    # The command's program is the entrypoint; the image, then its arguments, end the argv.
    assert argv[-5:] == [
        "--entrypoint=python",
        "localhost/team-tf:1",
        "train.py",
        "--steps",
        "5",
    ]


def test_the_jobs_directory_is_mounted_at_its_own_path_and_labels_mark_the_agent() -> None:
    argv = argv_of(message())
    job_dir = DATA / "jobs" / "7"
    assert options(argv, "--mount") == [f"type=bind,source={job_dir},target={job_dir}"]
    assert options(argv, "--label") == [
        f"cohort.data-dir={DATA}",
        "cohort.node-id=node-a",
    ]


def test_variables_go_by_name_and_their_values_only_through_the_clients_environment() -> None:
    start = message()
    argv = argv_of(start)
    given = options(argv, "--env")
    assert "TF_CONFIG" in given and "COHORT_JOB_ID" in given and "SECRET_TOKEN" in given
    assert not any("s3cr3t" in arg for arg in argv)  # never on a command line others read
    # HOME and TMPDIR are the client's own variables too: they go by value.
    assert f"HOME={DATA / 'jobs/7/attempt-2/replica-1'}" in given
    env = replica_env(start, ReplicaPaths.of(DATA, 7, 2, 1), container=True)
    client = containers.client_env({"PATH": "/usr/bin", "DOCKER_HOST": "unix:///d.sock"}, env)
    assert client["SECRET_TOKEN"] == "s3cr3t" and client["TF_CONFIG"] == env["TF_CONFIG"]
    assert client["PATH"] == "/usr/bin" and client["DOCKER_HOST"] == "unix:///d.sock"
    assert "HOME" not in client  # the agent gave none; the replica's is on the argv


def test_a_jobs_env_cannot_point_the_engine_client_elsewhere() -> None:
    env = {"DOCKER_HOST": "tcp://evil:2375", "CONTAINER_HOST": "x", "OK": "1"}
    client = containers.client_env({"PATH": "/usr/bin"}, env)
    assert client == {"PATH": "/usr/bin", "OK": "1"}


def test_the_container_gets_the_contract_but_nothing_of_the_nodes_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/opt/agent/bin")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/agent/lib")
    env = replica_env(message(), ReplicaPaths.of(DATA, 7, 2, 1), container=True)
    assert "PATH" not in env and "LD_LIBRARY_PATH" not in env  # the image's own
    assert "COHORT_AGENT_PID" not in env  # its pid means nothing in the container
    assert env["COHORT_NODE_ID"] == "node-a" and env["COHORT_REPLICA_INDEX"] == "1"
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_docker_gets_its_gpus_as_one_quoted_device_list_renumbered_inside() -> None:
    start = message(gpu_ids="2,3")
    argv = argv_of(start)
    assert options(argv, "--gpus") == ['"device=2,3"']  # docker's --gpus is a CSV
    env = replica_env(start, ReplicaPaths.of(DATA, 7, 2, 1), container=True)
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"  # the engine hands over only these two
    assert env["NVIDIA_VISIBLE_DEVICES"] == "2,3"


def test_podman_gets_its_gpus_as_cdi_devices() -> None:
    argv = argv_of(message(gpu_ids="0,5"), engine="/usr/bin/podman")
    assert options(argv, "--device") == ["nvidia.com/gpu=0", "nvidia.com/gpu=5"]
    assert "--gpus" not in argv
    assert containers.gpu_options("podman", "") == containers.gpu_options("docker", "") == []


def test_a_trainer_runs_cohorts_runner_from_the_image() -> None:
    start = message(trainer="mlp_digits", command=None)
    env = replica_env(start, ReplicaPaths.of(DATA, 7, 2, 1), container=True)
    assert env["COHORT_REPLICA_SPEC"] == str(DATA / "jobs/7/attempt-2/replica-1/spec.json")
    assert "COHORT_AGENT_PID" not in env
    argv = argv_of(start)
    assert argv[-5:] == [
        "--entrypoint=python",
        "localhost/team-tf:1",
        "-P",
        "-m",
        "workers.replica.runner",
    ]


def test_container_names_are_sanitised_and_differ_per_data_dir() -> None:
    name = containers.container_name("Node A/b", Path("/d1"), 7, 2, 1)
    assert name.startswith("cohort-Node-A-b-7-2-1-")
    assert name != containers.container_name("Node A/b", Path("/d2"), 7, 2, 1)
    assert all(c.isalnum() or c in "_.-" for c in name)


@pytest.mark.parametrize(
    "image",
    [
        "localhost/team-tf:1",
        "team-tf",
        "registry.example.com:5000/a/b_c:v1.2-rc",
        "ubuntu@sha256:" + "a" * 64,
    ],
)
def test_image_references_are_accepted(image: str) -> None:
    assert message(image=image).spec.image == image


@pytest.mark.parametrize(
    "image",
    ["-v/:/x", "team tf", "team;rm -rf /", "a$(id)", "Team/TF", "a:b:c", "", "x" * 256],
)
def test_anything_else_is_refused_in_the_start_message_too(image: str) -> None:
    with pytest.raises(ValueError, match="image"):
        message(image=image)
