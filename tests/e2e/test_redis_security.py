"""Redis with a password, and with TLS: every process (api, scheduler, agent, Celery's
broker, replicas, `cohort health`) dials it through the one COHORT_REDIS_URL."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import trustme

from services.statuses import TERMINAL_STATUSES
from tests.capabilities import need_redis_server
from tests.e2e.conftest import free_port, pg_stack_with, wait_terminal

PASSWORD = "s3cret-p@ss/word"  # quoted in URLs: '@' and '/' must not end the host part
QUOTED = "s3cret-p%40ss%2Fword"
JOB = {
    "name": "secure-redis",
    "trainer": "mlp_digits",
    "strategy": "one_device",
    "replicas": 1,
    "hyperparameters": {"epochs": 1, "steps_per_epoch": 5},
}


@contextlib.contextmanager
def redis_server(tmp_path: Path, *args: str, port: int) -> Iterator[None]:
    """A redis-server of this test's own, listening on `port` (plain or TLS, per args)."""
    binary = need_redis_server()
    process = subprocess.Popen(
        [
            binary,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
            *args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert process.poll() is None, "redis-server exited"
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert time.monotonic() < deadline, "redis-server did not listen"
            time.sleep(0.05)
        yield
    finally:
        process.terminate()
        process.wait(timeout=20)


def service(url: str, tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("COHORT_")},
        "COHORT_REDIS_URL": url,
        "COHORT_DATA_DIR": str(tmp_path / "var"),
        # Keys that pass their own checks: Redis's refusal is what these tests see.
        "COHORT_SIGNING_KEY": "k" * 64,
        "COHORT_NODE_KEY": "ab" * 32,
    }
    return subprocess.run(
        [sys.executable, "-m", "cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_one_job(tmp_path: Path, url: str) -> None:
    """A stack (api, scheduler, agent) on Redis at `url` runs a job to success."""
    with pg_stack_with(tmp_path, {"COHORT_REDIS_URL": url}) as (stack, client):
        job_id = client.submit(JOB)["id"]
        # The api's SSE reader follows the job's live feed in Redis (an asyncio client).
        statuses: list[str] = []
        for event in client.stream(job_id, kinds=("status",)):
            statuses.append(event.data["status"])
            if statuses[-1] in TERMINAL_STATUSES:
                break
        assert len(statuses) >= 2 and statuses[-1] == "succeeded", statuses
        job = wait_terminal(client, job_id)
        assert job["status"] == "succeeded", job["reason"]
        points = client.metrics(job["id"], name="loss")
        assert points  # the replica's metrics came through Redis too
        for name in ("scheduler", "agent"):
            done = subprocess.run(
                [sys.executable, "-m", "cli", "health", name],
                env=stack.env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_or_missing_password_stops_services_at_start_up(tmp_path: Path) -> None:
    port = free_port()
    with redis_server(tmp_path, "--port", str(port), "--requirepass", PASSWORD, port=port):
        for command in (("scheduler",), ("agent",)):
            wrong = service(f"redis://:not-it@127.0.0.1:{port}/0", tmp_path, *command)
            assert wrong.returncode == 1
            assert (
                wrong.stderr.strip()
                .splitlines()[-1]
                .startswith(
                    f"cohort: Redis at redis://:***@127.0.0.1:{port}/0 refused the credentials "
                    "in COHORT_REDIS_URL"
                )
            ), wrong.stderr
            assert "not-it" not in wrong.stderr + wrong.stdout
            missing = service(f"redis://127.0.0.1:{port}/0", tmp_path, *command)
            assert missing.returncode == 1
            assert "requires a password: give it in COHORT_REDIS_URL" in missing.stderr, (
                missing.stderr
            )
        unhealthy = service(f"redis://:not-it@127.0.0.1:{port}/0", tmp_path, "health", "agent")
        assert unhealthy.returncode == 1 and "not-it" not in unhealthy.stdout


def test_a_job_runs_on_redis_with_a_password(tmp_path: Path) -> None:
    port = free_port()
    with redis_server(tmp_path, "--port", str(port), "--requirepass", PASSWORD, port=port):
        run_one_job(tmp_path, f"redis://:{QUOTED}@127.0.0.1:{port}/0")


def test_a_job_runs_over_tls_with_a_password(tmp_path: Path) -> None:
    ca, other_ca = trustme.CA(), trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_file, other_file = tmp_path / "ca.pem", tmp_path / "other-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    other_ca.cert_pem.write_to_path(str(other_file))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    port = free_port()
    with redis_server(
        tmp_path,
        "--port",
        "0",
        "--tls-port",
        str(port),
        "--tls-cert-file",
        str(tmp_path / "server.crt"),
        "--tls-key-file",
        str(tmp_path / "server.key"),
        "--tls-ca-cert-file",
        str(ca_file),
        "--tls-auth-clients",
        "no",
        "--requirepass",
        PASSWORD,
        port=port,
    ):
        # A server whose certificate the given CA did not sign is refused, at once.
        untrusted = service(
            f"rediss://:{QUOTED}@127.0.0.1:{port}/0?ssl_ca_certs={other_file}", tmp_path, "agent"
        )
        assert untrusted.returncode == 1
        assert "certificate" in untrusted.stderr.strip().splitlines()[-1], untrusted.stderr
        run_one_job(tmp_path, f"rediss://:{QUOTED}@127.0.0.1:{port}/0?ssl_ca_certs={ca_file}")
