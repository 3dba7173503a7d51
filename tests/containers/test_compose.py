"""docker-compose.yml as `make compose-up` starts it, from the images `make images` built.

One stack for the module (its own compose project, port, secrets and volumes), with a
second agent (compose.second-agent.yaml: two nodes, each a host of its own on the compose
network) and PostgreSQL and the S3 endpoint published on loopback for the checks
(compose.test-ports.yaml). Where no registry answers, the third-party services are the
stand-ins of deploy/standins. The tests run in this order and share the stack's state:

1. every long-running service is healthy by its own HEALTHCHECK, and `cohort health`
   answers inside each; the api and scheduler run as uid 10001;
2. a 2-replica MultiWorkerMirroredStrategy job spread over the two agents trains; the
   model downloads through the api on the host and loads in TensorFlow;
3. a replica, run as its job's uid, finds no credential of the stack anywhere it can read;
4. an agent container killed mid-run: the job resumes on the other agent from the
   checkpoint in the store, the container comes back by its restart policy and
   registers again, and what the replicas wrote is all stored once;
5. a second `make compose-up` changes nothing; one on a port in use fails in one line;
6. `make compose-down` then `make compose-up`: jobs, tokens, schedules and artifacts
   are still there.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import psutil
import pytest

from cohort.client import Client
from services.wire.signing import node_key
from tests.conftest import worker_number
from tests.containers.conftest import ROOT, Images
from tests.e2e.conftest import free_port, job_story, wait_for, wait_terminal
from tests.faults.conftest import running_replica, saved_checkpoint, steps_seen
from tests.faults.nothing_lost import assert_stored_as_written
from workers import layout
from workers.node.checkpoint_names import named_checkpoints

pytestmark = [pytest.mark.slow(900), pytest.mark.timeout(2400)]

HERE = Path(__file__).resolve().parent
SERVICE_UID = 10001
LONG_RUNNING = ("postgres", "redis", "minio", "api", "scheduler", "agent", "agent-2")
HEALTH = {"api": "api", "scheduler": "scheduler", "agent": "agent", "agent-2": "agent"}
NODES = {"agent": "agent-1", "agent-2": "agent-2"}  # compose service: node id
NODES_SERVICE = {node: service for service, node in NODES.items()}
EVERY = 25  # steps between two checkpoints of the resumable job
RESUMABLE: dict[str, Any] = {
    "name": "resumable",
    "replicas": 1,
    "restart_policy": "on_failure",
    "max_restarts": 2,
    "hyperparameters": {
        "epochs": 4,
        "steps_per_epoch": 100,
        "hidden_units": 256,
        "checkpoint_every_steps": EVERY,
    },
}


@dataclass
class ComposeStack:
    project: str
    port: int
    state: Path  # COHORT_COMPOSE_DIR
    env: dict[str, str]  # what `make compose-up` runs with
    pg_port: int
    s3_port: int

    def make(
        self, *targets: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["make", "--no-print-directory", *targets],
            cwd=ROOT,
            env={**self.env, **(env or {})},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )

    @property
    def secrets(self) -> dict[str, str]:
        lines = (self.state / "secrets.env").read_text().splitlines()
        return dict(line.split("=", 1) for line in lines if "=" in line)

    @property
    def token(self) -> str:
        return (self.state / "token").read_text().strip()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> Client:
        return Client(self.url, self.token)

    @staticmethod
    def running(container: str) -> bool:
        return docker("inspect", "--format", "{{.State.Running}}", container).strip() == "true"

    @staticmethod
    def containers(project: str) -> list[str]:
        """The containers of compose project `project`, running or not."""
        label = f"label=com.docker.compose.project={project}"
        return docker("ps", "--all", "--quiet", "--filter", label).split()

    def container(self, service: str) -> str:
        found = docker(
            "ps", "--all", "--quiet",
            "--filter", f"label=com.docker.compose.project={self.project}",
            "--filter", f"label=com.docker.compose.service={service}",
        ).split()  # fmt: skip
        assert len(found) == 1, f"{service}: containers {found}"
        return found[0]

    def inspect(self, service: str) -> dict[str, Any]:
        found: list[dict[str, Any]] = json.loads(docker("inspect", self.container(service)))
        return found[0]

    def exec(self, service: str, *command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", "exec", self.container(service), *command],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def database_url(self) -> str:
        password = self.secrets["POSTGRES_PASSWORD"]
        return f"postgresql+psycopg://postgres:{password}@127.0.0.1:{self.pg_port}/cohort"

    def data_dirs(self) -> dict[str, Path]:
        """Each agent's /data, as the host sees its volume."""
        dirs = {}
        for service, node in NODES.items():
            mounts = self.inspect(service)["Mounts"]
            dirs[node] = Path(next(m["Source"] for m in mounts if m["Destination"] == "/data"))
        return dirs

    def s3(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{self.s3_port}",
            region_name="us-east-1",
            aws_access_key_id=self.secrets["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.secrets["AWS_SECRET_ACCESS_KEY"],
        )


def docker(*arguments: str) -> str:
    done = subprocess.run(
        ["docker", *arguments], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"docker {' '.join(arguments)}: {done.stderr}"
    return done.stdout


def healthy(stack: ComposeStack) -> dict[str, str]:
    return {
        service: (stack.inspect(service)["State"].get("Health") or {}).get("Status", "none")
        for service in LONG_RUNNING
    }


@pytest.fixture(scope="module")
def stack(images: Images, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeStack]:
    if images.engine != "docker":
        pytest.fail(
            f"`make images` built with {images.engine}: the compose stack needs Docker's "
            "daemon (its healthchecks and depends_on conditions); .ci/run starts one"
        )
    state = tmp_path_factory.mktemp("compose")
    project = f"cohort-test-{worker_number()}-{os.getpid()}"
    made = ComposeStack(
        project=project,
        port=free_port(),
        state=state,
        env={},
        pg_port=free_port(),
        s3_port=free_port(),
    )
    made.env = {
        **os.environ,
        "COHORT_COMPOSE_PROJECT": project,
        "COHORT_COMPOSE_PORT": str(made.port),
        "COHORT_COMPOSE_DIR": str(state),
        "COHORT_COMPOSE_NODES": "agent-1,agent-2",
        "COHORT_COMPOSE_FILES": f"{HERE / 'compose.second-agent.yaml'}:"
        f"{HERE / 'compose.test-ports.yaml'}",
        "COHORT_TEST_PG_PORT": str(made.pg_port),
        "COHORT_TEST_S3_PORT": str(made.s3_port),
    }
    up = made.make("compose-up")
    assert up.returncode == 0, up.stdout + up.stderr
    assert f"api: http://127.0.0.1:{made.port}" in up.stdout, up.stdout
    try:
        yield made
    finally:
        down = made.make("compose-down", env={"VOLUMES": "1"})
        assert down.returncode == 0, down.stdout + down.stderr


def test_every_service_is_healthy_and_cohort_health_answers_inside(stack: ComposeStack) -> None:
    wait_for(
        lambda: set(healthy(stack).values()) == {"healthy"},
        180,
        "every long-running service healthy",
        explain=lambda: str(healthy(stack)),
    )
    for service, name in HEALTH.items():
        done = stack.exec(service, "cohort", "health", name)
        assert done.returncode == 0, f"{service}: {done.stdout}{done.stderr}"
    secrets = (stack.state / "secrets.env").stat()
    assert secrets.st_mode & 0o777 == 0o600
    assert (stack.state / "token").stat().st_mode & 0o777 == 0o600
    for service in ("api", "scheduler"):
        assert stack.inspect(service)["Config"]["User"] == f"{SERVICE_UID}:{SERVICE_UID}"
        assert stack.exec(service, "id", "-u").stdout.strip() == str(SERVICE_UID)
        assert stack.exec(service, "cat", "/proc/1/status").stdout.count(f"\t{SERVICE_UID}\t") >= 1


def test_a_spread_job_trains_on_both_agents_and_its_model_loads_on_the_host(
    stack: ComposeStack, tmp_path: Path
) -> None:
    client = stack.client()
    wait_for(
        lambda: {n["id"] for n in client.nodes() if n["status"] == "ready"} >= set(NODES.values()),
        120,
        "both agents ready",
    )
    job = client.submit(
        {
            "name": "two-containers",
            "replicas": 2,
            "placement": "spread",
            "hyperparameters": {"epochs": 1, "steps_per_epoch": 5},
        }
    )
    done = wait_terminal(client, job["id"], timeout=420)
    assert done["status"] == "succeeded", job_story(client, job["id"])
    replicas = done["replica_list"]
    assert sorted(r["node_id"] for r in replicas) == sorted(NODES.values())
    workers = replicas[0]["tf_config"]["cluster"]["worker"]
    assert sorted(w.rsplit(":", 1)[0] for w in workers) == sorted(NODES.values())
    logs = " ".join(line["line"] for line in client.logs(job["id"], limit=10_000))
    assert "num_replicas_in_sync=2" in logs

    # The CLI as installed, from the host.
    cohort = str(Path(sys.executable).parent / "cohort")
    cli = subprocess.run(
        [cohort, "artifact", "download", str(job["id"]), "model", "-o", str(tmp_path / "out")],
        env={**os.environ, "COHORT_URL": stack.url, "COHORT_TOKEN": stack.token},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    model = next(p.parent for p in (tmp_path / "out").rglob("saved_model.pb"))
    load = subprocess.run(
        [sys.executable, "-c", LOAD, str(model)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert load.returncode == 0 and "loaded" in load.stdout, load.stderr[-3000:]


LOAD = "import sys, tensorflow as tf; tf.saved_model.load(sys.argv[1]); print('loaded')"

# Run as the replica: every credential of the stack it could find, by where it found it.
# It looks in its environment, in every process's environment and command line it may
# read, and in every file it may read under /data, /tmp, /etc, /run and its HOME.
PROBE = r"""
import json, os, sys
# Given reversed: the job's command line, which processes of the job can read, must not
# hold them as they are.
secrets = {name: value[::-1] for name, value in json.loads(sys.argv[1]).items()}
found = []
def look(where, text):
    for name, value in secrets.items():
        if value in text:
            found.append(f"{name} in {where}")
look("its environment", "\n".join(f"{k}={v}" for k, v in os.environ.items()))
read = {"processes": 0, "files": 0}
for pid in filter(str.isdigit, os.listdir("/proc")):
    for part in ("environ", "cmdline"):
        try:
            look(f"/proc/{pid}/{part}", open(f"/proc/{pid}/{part}", "rb").read().decode("latin-1"))
            read["processes"] += part == "environ"
        except OSError:
            pass
for top in ("/data", "/tmp", "/etc", "/run", os.environ.get("HOME", "/nonexistent")):
    for folder, _, files in os.walk(top):
        for name in files:
            path = os.path.join(folder, name)
            try:
                with open(path, "rb") as f:
                    look(path, f.read(1 << 20).decode("latin-1"))
                read["files"] += 1
            except OSError:
                pass
print("uid", os.getuid(), "gid", os.getgid())
print("read", json.dumps(read))
print("found", json.dumps(found))
"""


def test_a_replica_runs_as_its_jobs_uid_and_reads_no_credential(stack: ComposeStack) -> None:
    client = stack.client()
    secrets = {
        name: value
        for name, value in stack.secrets.items()
        if name != "AWS_ACCESS_KEY_ID"  # a name, not a secret (the key's secret is)
    }
    for node in NODES.values():  # each agent's key, as `cohort node-key` derives it
        secrets[f"node key of {node}"] = node_key(secrets["COHORT_SIGNING_KEY"], node)
    job = client.submit(
        {
            "name": "probe",
            "replicas": 1,
            "command": [
                "python",
                "-c",
                PROBE,
                json.dumps({name: value[::-1] for name, value in secrets.items()}),
            ],
        }
    )
    done = wait_terminal(client, job["id"], timeout=300)
    assert done["status"] == "succeeded", job_story(client, job["id"])
    lines = [line["line"] for line in client.logs(job["id"], limit=10_000)]
    ids = next(line for line in lines if line.startswith("uid "))
    uid = int(ids.split()[1])
    assert uid not in (0, SERVICE_UID), ids  # the job's own, neither root nor the service's
    found = json.loads(next(line for line in lines if line.startswith("found "))[6:])
    assert found == [], found
    # It looked: at least its own process and the files of /etc a replica may read.
    read = json.loads(next(line for line in lines if line.startswith("read "))[5:])
    assert read["processes"] >= 1 and read["files"] >= 20, read
    # The agent that started it is root: the replica's uid is not its own.
    agent = stack.inspect(NODES_SERVICE[done["replica_list"][0]["node_id"]])
    assert agent["Config"]["User"] == "0:0"


def stored_checkpoint(stack: ComposeStack, job_id: int) -> int | None:
    """n of the newest checkpoint (ckpt-<n>) the store's state file names, if any."""
    key = f"artifacts/jobs/{job_id}/checkpoints/chief/checkpoint"
    try:
        body = stack.s3().get_object(Bucket="cohort", Key=key)["Body"].read()
    except stack.s3().exceptions.NoSuchKey:
        return None
    names = named_checkpoints(body)
    if not names or not names[0].startswith("ckpt-"):
        return None
    return int(names[0].removeprefix("ckpt-"))


def host_pid(container_pid: int, pid: int) -> int:
    """The host's pid of the process `pid` in the container whose first process is
    `container_pid` on the host (the api gives a replica's pid as its container sees it):
    the process whose NSpid, its pid in each pid namespace, ends with `pid`."""
    for process in psutil.Process(container_pid).children(recursive=True):
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{process.pid}/status").read_text()
            ids = next(
                line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")
            )
            if ids[-1] == str(pid):
                return process.pid
    raise AssertionError(f"no process {pid} under container process {container_pid}")


def test_an_agent_container_killed_mid_run_its_job_resumes_on_the_other(
    stack: ComposeStack,
) -> None:
    client = stack.client()
    job = client.submit(RESUMABLE)
    replica = running_replica(client, job["id"], timeout=300)
    node = replica["node_id"]
    service = NODES_SERVICE[node]
    before = stack.inspect(service)
    # The replica is held still (SIGSTOP, from the host) once its first checkpoint is on
    # its node's volume: 400 quick steps end in a second or two on a quiet machine, and
    # the agent mirrors the checkpoint directory once a second, so a job left running
    # could end (its BackupAndRestore deleting the directory, the mirror the stored copy
    # with it) between two syncs, and the store never hold a checkpoint (a clean-clone
    # run: no checkpoint in 300 s, the job succeeded on attempt 1). Frozen, its checkpoint
    # stays for the agent to mirror; the container's crash below ends it (SIGKILL reaches
    # a stopped process).
    local = layout.checkpoint_dir(stack.data_dirs()[node], job["id"]) / "chief"
    wait_for(lambda: saved_checkpoint(local), 300, "the first checkpoint on disk", interval=0.02)
    os.kill(host_pid(before["State"]["Pid"], replica["pid"]), signal.SIGSTOP)
    number = wait_for(
        lambda: stored_checkpoint(stack, job["id"]),
        60,
        "the job's first checkpoint in the store",
        explain=lambda: job_story(client, job["id"]),
    )
    # A crash, not a stop: the restart policy brings a crashed container back. Its replica
    # dies with it (the container's PID 1), so once it is gone nothing more of attempt 1
    # reaches the store: the newest stored checkpoint is the one to resume from.
    os.kill(before["State"]["Pid"], 9)
    wait_for(
        lambda: stack.inspect(service)["State"]["Pid"] != before["State"]["Pid"],
        60,
        f"{service}'s first container process gone",
    )
    last = stored_checkpoint(stack, job["id"])
    assert last is not None and last >= number and last * EVERY < 400, (last, number)

    final = wait_terminal(client, job["id"], timeout=420)
    assert final["status"] == "succeeded", job_story(client, job["id"])
    assert final["attempt"] == 2, job_story(client, job["id"])
    second = steps_seen(client, job["id"], 2)
    assert max(second) == 400
    (resumed_on,) = {r["node_id"] for r in final["replica_list"]}
    if resumed_on != node:
        # The other agent has nothing of attempt 1 but what the store has.
        assert min(second) - 1 == last * EVERY, (last, min(second))
    else:
        # The killed container came back before the job was placed again (placement may
        # choose either ready node): its own volume may hold a checkpoint the store had
        # not received yet, and restoring the newer one is right.
        assert min(second) - 1 >= last * EVERY, (last, min(second))

    # Back by its restart policy, and registered again.
    wait_for(
        lambda: stack.inspect(service)["RestartCount"] > before["RestartCount"],
        60,
        f"{service} restarted",
    )
    wait_for(
        lambda: any(n["id"] == node and n["status"] == "ready" for n in client.nodes()),
        120,
        f"{node} registered again",
    )
    assert_stored_as_written(stack.database_url(), stack.data_dirs(), job["id"], agent_died_in=[1])


def test_compose_up_again_is_a_no_op_and_a_port_in_use_fails_in_one_line(
    stack: ComposeStack, tmp_path: Path
) -> None:
    started = {s: stack.inspect(s)["State"]["StartedAt"] for s in ("api", "scheduler", "postgres")}
    again = stack.make("compose-up")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already up" in again.stdout
    assert {s: stack.inspect(s)["State"]["StartedAt"] for s in started} == started

    # Another project on the port this stack's api holds.
    taken = stack.make(
        "compose-up",
        env={
            "COHORT_COMPOSE_PROJECT": f"{stack.project}-other",
            "COHORT_COMPOSE_DIR": str(tmp_path),
        },
    )
    assert taken.returncode != 0
    errors = [line for line in taken.stderr.splitlines() if line.startswith("compose:")]
    assert errors == [
        f"compose: 127.0.0.1:{stack.port} is in use by another program: free it or set "
        "COHORT_COMPOSE_PORT"
    ], taken.stderr
    assert stack.containers(f"{stack.project}-other") == []


def test_down_then_up_keeps_jobs_tokens_schedules_and_artifacts(stack: ComposeStack) -> None:
    client = stack.client()
    issued = client.request("POST", "/api/v1/tokens", {"name": "kept", "scopes": ["read"]})
    schedule = client.request(
        "POST",
        "/api/v1/schedules",
        {
            "name": "nightly",
            "job": {"replicas": 1, "hyperparameters": {"epochs": 1, "steps_per_epoch": 2}},
            "cron": "0 0 1 1 *",  # once a year: a run firing mid-test would add a job
        },
    )
    jobs = {j["id"]: j["status"] for j in client.jobs(limit=100)["items"]}
    assert jobs, "the earlier tests' jobs"
    with_model = min(j for j, status in jobs.items() if status == "succeeded")
    listed = {a["path"] for a in client.artifacts(with_model)}

    down = stack.make("compose-down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "volumes kept" in down.stdout
    assert [c for c in stack.containers(stack.project) if stack.running(c)] == []
    up = stack.make("compose-up")
    assert up.returncode == 0, up.stdout + up.stderr

    client = stack.client()
    assert {j["id"]: j["status"] for j in client.jobs(limit=100)["items"]} == jobs
    kept = Client(stack.url, issued["token"])
    assert kept.jobs(limit=1)["items"]
    names = [s["name"] for s in client.request("GET", "/api/v1/schedules")["items"]]
    assert schedule["name"] in names
    assert {a["path"] for a in client.artifacts(with_model)} == listed
    client.download(with_model, "model/saved_model.pb", stack.state / "saved_model.pb")
    assert (stack.state / "saved_model.pb").stat().st_size > 0
