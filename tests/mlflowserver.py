"""A real MLflow tracking server for tests: `mlflow server` as a child process, on a SQLite
backend and an artifact directory of its own.

The server is the full `mlflow` package, of the same version as the `mlflow-skinny` client
Cohort pins; it lives in a virtualenv of its own, built once per version and kept in the
user's cache (as tests/install keeps its wheelhouse): installed beside the client it
would change a package the development environment pins otherwise (graphql-core), and
bring pandas, pyarrow and matplotlib to every test. The client under test stays the one
the control plane installs.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cohort-test"


def client_version() -> str:
    """The version of MLflow's client installed here (mlflow-skinny)."""
    from importlib.metadata import version

    return version("mlflow-skinny")


def server_python() -> Path:
    """The interpreter of a virtualenv with `mlflow==<client version>`, built on first use
    (about a minute) under a lock, so that two test processes build it once."""
    version = client_version()
    home = CACHE / f"mlflow-server-{version}"
    python = home / "bin" / "python"
    ready = home / ".ready"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"mlflow-server-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.exists():
            shutil.rmtree(home, ignore_errors=True)  # a build cut short
            subprocess.run([sys.executable, "-m", "venv", str(home)], check=True, timeout=300)
            subprocess.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    f"mlflow=={version}",
                ],
                check=True,
                timeout=1200,
            )
            ready.touch()
    return python


class MlflowServer:
    """`mlflow server` on 127.0.0.1:`port`, its store under `root`; stopped and started
    again on the same port and store, it is the same server back (a test of an outage)."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self.uri = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None
        (root / "artifacts").mkdir(parents=True, exist_ok=True)

    def start(self, timeout: float = 120) -> None:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("COHORT_", "PYTHON", "VIRTUAL_ENV", "MLFLOW_"))
        }
        env["MLFLOW_DISABLE_TELEMETRY"] = "true"
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 - the child's output
        self.process = subprocess.Popen(
            [
                str(server_python()),
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                f"sqlite:///{self.root / 'mlflow.db'}",
                "--artifacts-destination",
                str(self.root / "artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.root,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{self.uri}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                output = (self.root / "server.log").read_text()[-3000:]
                raise RuntimeError(f"mlflow server did not start:\n{output}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server and its workers (its own process group), and wait for them."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(timeout=10)
