"""Settings for every Cohort process, read from `COHORT_*` environment variables."""

from __future__ import annotations

import re
import secrets
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import quote

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from services.data_dir import private_data_dir
from services.health_settings import HealthSettings
from services.replica_pool_settings import ReplicaPoolSettings
from services.setting_lists import split_list
from services.telemetry_settings import TelemetrySettings
from services.webhooks.settings import WebhookSettings

# An MLflow server's address: http(s)://host[:port][/path], databricks[://profile], or ""
# (none). Also the pattern the API's schema gives (services/tracking/schemas.py).
TRACKING_URI_PATTERN = (
    r"^\s*(https?://[A-Za-z0-9._~%!$&'()*+,;=-]+(:[0-9]*)?(/\S*)?|databricks(://\S*)?)?\s*$"
)


def tracking_uri_problem(uri: str) -> str | None:
    """What is wrong with an MLflow tracking URI, or None (TRACKING_URI_PATTERN). A local
    path or database URI would be the scheduler's own disk, out of every other machine's
    reach, and the control plane installs MLflow's client only."""
    if re.fullmatch(TRACKING_URI_PATTERN, uri):
        return None
    return (
        f"{uri.strip()[:100]!r} is not an MLflow server's address: give "
        "http(s)://host[:port] (or databricks, databricks://PROFILE)"
    )


class Settings(
    WebhookSettings, HealthSettings, ReplicaPoolSettings, TelemetrySettings, BaseSettings
):
    """Configuration shared by the api, the scheduler, agents and the CLI."""

    model_config = SettingsConfigDict(env_prefix="COHORT_", extra="ignore", case_sensitive=False)

    DATA_DIR: Path = Path("var")
    DATABASE_URL: str = ""  # empty = SQLite file in DATA_DIR
    REDIS_URL: str = ""  # empty = the embedded Redis that `cohort up` starts
    # The port `cohort up` gives its embedded redis-server, and where every
    # process looks for Redis when REDIS_URL is unset (with the password in
    # DATA_DIR/redis-password, which `cohort up` makes on first use). Unset, `cohort up`
    # takes 6389 if free, else a free one, and writes it in DATA_DIR/redis-port
    # (cli/stack_ports.py): see `embedded_redis_port`.
    EMBEDDED_REDIS_PORT: int = 6389

    API_HOST: str = "127.0.0.1"
    API_PORT: int = 8000
    # uvicorn worker processes of `cohort api` (each with its own thread pool and
    # connection pool): one process's Python holds one core at most.
    API_WORKERS: int = Field(1, ge=1, le=64)
    # An admin token of project `default`, registered at the api's start (at least 32
    # characters); a new value revokes the previous one (services/auth/tokens.py).
    BOOTSTRAP_TOKEN: str = ""
    # A dashboard login lasts this many seconds (never past its token's expiry).
    SESSION_LIFETIME: int = Field(12 * 3600, ge=60, le=90 * 24 * 3600)

    # Messages between the control plane and the agents are signed (services/wire/signing.py):
    # the scheduler holds SIGNING_KEY; each agent holds only its own NODE_KEY, which
    # `cohort node-key NODE_ID` derives from it. An agent refuses a message to it older than
    # MESSAGE_MAX_AGE seconds (the scheduler re-sends what is still due every 15-20 s), its
    # age read on Redis's clock at both ends (services/wire/clock.py): a host's own clock
    # may be off by any amount.
    SIGNING_KEY: str = ""
    NODE_KEY: str = ""
    MESSAGE_MAX_AGE: float = Field(120.0, gt=0)

    # Trainers: built-ins are always allowed; `module:function` only when listed here,
    # as "a.b:f,c.d:g" or a JSON list. NoDecode: pydantic-settings would otherwise parse
    # the variable as JSON before the validator below sees it, and refuse the comma form.
    ALLOWED_ENTRYPOINTS: Annotated[list[str], NoDecode] = Field(default_factory=list)
    MAX_REPLICAS: int = 64
    # A job's hyperparameters (any JSON) are at most this many bytes, encoded; at most
    # this many keys (objects' members at every depth) and this deep (objects and lists).
    MAX_HYPERPARAMETERS_BYTES: int = 256 * 1024
    MAX_HYPERPARAMETERS_KEYS: int = Field(1000, ge=1)
    MAX_HYPERPARAMETERS_DEPTH: int = Field(8, ge=1, le=100)
    # A request body (a job, schedule or sweep spec, a form) is refused with 413 past this
    # many bytes, before it is read whole; code bundles and data uploads have their own
    # bounds (MAX_BUNDLE_BYTES, MAX_DATA_BYTES).
    MAX_REQUEST_BYTES: int = Field(1024 * 1024, ge=1024)
    # A sweep runs at most this many trials (a grid's combinations, a random sweep's draws).
    MAX_SWEEP_TRIALS: int = Field(1000, ge=1)

    # Artifact store (services/storage): a directory (default <DATA_DIR>/artifacts) or
    # s3://bucket/prefix; ENDPOINT_URL for MinIO and other S3-compatible servers.
    ARTIFACT_URL: str = ""
    ARTIFACT_ENDPOINT_URL: str = ""
    # Seconds between two copies of a running replica's TensorBoard directory to the store
    # (what changed: workers/node/board_syncer.py), which `cohort tensorboard` follows.
    TENSORBOARD_SYNC_INTERVAL: float = Field(10.0, gt=0)
    # Code bundles: compressed bytes, entries, and bytes once unpacked.
    MAX_BUNDLE_BYTES: int = Field(100 * 1024 * 1024, ge=1)
    MAX_BUNDLE_FILES: int = Field(10_000, ge=1)
    MAX_BUNDLE_UNPACKED_BYTES: int = Field(1024 * 1024 * 1024, ge=1)
    # A node's cache of fetched bundles (archives and unpacked trees), least recently
    # used evicted past this many bytes.
    BUNDLE_CACHE_BYTES: int = Field(2 * 1024 * 1024 * 1024, ge=0)
    # A node's job environments (workers/node/envs.py: one virtualenv per requirements),
    # least recently used evicted past this many bytes; one in use is never evicted.
    ENV_CACHE_BYTES: int = Field(5 * 1024 * 1024 * 1024, ge=0)
    # A project's data file (PUT /api/v1/data/{path}): bytes of one upload.
    MAX_DATA_BYTES: int = Field(1024 * 1024 * 1024, ge=1)

    # Node agent
    NODE_ID: str = ""
    NODE_ADDRESS: str = "127.0.0.1"
    NODE_SLOTS: int = 2
    NODE_GPUS: int = 0
    # Before offering the GPUs it found, the agent asks the replicas' TensorFlow how many
    # it sees and offers none if none (workers/node/gpus.py); false trusts NVML alone.
    NODE_GPU_PROBE: bool = True
    PORT_RANGE_START: int = 29500
    PORT_RANGE_END: int = 29999
    # The Python that runs replicas (`-m workers.replica.runner`); empty = the agent's own.
    REPLICA_PYTHON: str = ""
    # An agent as root runs a job's replicas as uid = gid = REPLICA_UID_BASE + job id %
    # REPLICA_UID_RANGE (workers/node/isolation.py), no passwd entry needed; the default
    # span is one systemd leaves unused; the agent checks it can hand files to it.
    REPLICA_UID_BASE: int = Field(0x7000_0000, ge=1000, le=2**31 - 2)
    REPLICA_UID_RANGE: int = Field(1 << 24, ge=1)
    # An agent as root gives each replica its own /tmp and /dev/shm (a tmpfs in a mount
    # namespace: workers/private_tmp.py) where the node allows it; false: the node's.
    REPLICA_PRIVATE_TMP: bool = True
    # The container engine that runs the replicas of jobs with an `image`
    # (workers/node/containers.py): "docker" or "podman", its CLI on PATH; "": none, and
    # the node takes no such job. The node advertises it in its heartbeat.
    CONTAINER_ENGINE: Literal["", "docker", "podman"] = ""
    # Where a job sets no placement policy: "pack" (fewest nodes) or "spread".
    PLACEMENT_POLICY: Literal["pack", "spread"] = "pack"

    # The api under abuse (docs/security.md, "Browser and HTTP hardening").
    # `GET /metrics` wants `Authorization: Bearer <METRICS_TOKEN>`; unset, it is off (404).
    METRICS_TOKEN: str = ""
    # Live streams (SSE) one token may hold open in one api process; one more gets 429.
    MAX_STREAMS_PER_TOKEN: int = Field(20, ge=1)
    # Failed `POST /login`s from one client address within the window (seconds) before
    # the next ones get 429 until the window ends.
    LOGIN_MAX_FAILURES: int = Field(10, ge=1)
    LOGIN_FAILURE_WINDOW: int = Field(300, ge=1)

    # Scheduler timing (seconds); events wake a pass at once (workers/control/pacing.py)
    SCHEDULER_INTERVAL: float = 2.0  # the heartbeats' pace: for what only time changes
    # The leader's Redis lock lasts this long unless renewed (every pass): a leader that
    # dies or freezes is replaced this long after its last renewal, and a transaction it
    # leaves open is ended by PostgreSQL after this long idle (services/cluster/fencing.py).
    SCHEDULER_LOCK_TTL: float = Field(10.0, gt=0)
    HEARTBEAT_INTERVAL: float = 2.0
    NODE_TIMEOUT: float = 15.0  # a node whose heartbeat is older is lost
    # An agent whose heartbeats Redis has not taken for this long stops its own
    # replicas: shorter than NODE_TIMEOUT, so they are gone before the gang is placed
    # again elsewhere (no two copies of one replica; workers/node/lease.py), and longer
    # than HEARTBEAT_INTERVAL, so a healthy agent's lease never lapses between beats.
    AGENT_LEASE: float = 10.0

    # Failure handling (seconds)
    STOP_GRACE: float = 8.0  # SIGTERM, then SIGKILL after this
    # A start message whose replica is still pending after this long, or a stop whose
    # replica still runs, is sent again from SQL (lost between commit and send, or with a
    # Redis restart). A copy is harmless (an agent acts on a start once: its claim; on a
    # stop of a gone replica, not at all), so these bound what a lost message costs.
    START_RESEND_AFTER: float = Field(20.0, gt=0)
    STOP_RESEND_AFTER: float = Field(15.0, gt=0)
    # A replica placed on a ready node whose agent, this long after, neither runs it, nor
    # works on any start (a checkpoint restored, code fetched), nor reports its exit was
    # never started and will not be (an agent that cannot act on its start, re-sent or
    # not): it is lost, and the gang's restart policy decides, rather than the job
    # waiting `scheduled` for good.
    START_ANSWER_TIMEOUT: float = Field(120.0, gt=0)
    STARTUP_TIMEOUT: float = 180.0  # from spawn to the first training step
    PROGRESS_TIMEOUT: float = 120.0  # between two progress heartbeats of a replica
    RESTART_BACKOFF: float = 2.0  # first restart waits this, then doubles...
    RESTART_BACKOFF_MAX: float = 60.0  # ...up to this
    # parameter_server: times an agent starts a lost worker process again in place
    # before its exit counts (and the gang restarts); how long the evaluator may go
    # on after the chief succeeded, to evaluate the last checkpoint.
    PS_WORKER_RESTARTS: int = Field(3, ge=0, le=100)
    EVALUATOR_GRACE: float = Field(60.0, ge=0)

    # Quotas: the defaults of every project (an admin overrides them per project,
    # PUT /api/v1/projects/{name}/quota; services/jobs/quotas.py). Unset (or "none"):
    # no limit. Counts refused at submission (429): queued jobs, schedules; a priority
    # above the ceiling is refused (403); running replicas and GPUs in use make a job
    # wait in the queue with the reason.
    QUOTA_MAX_QUEUED_JOBS: int | None = Field(1000, ge=0)
    QUOTA_MAX_RUNNING_REPLICAS: int | None = Field(None, ge=0)
    QUOTA_MAX_GPUS: int | None = Field(None, ge=0)
    QUOTA_MAX_SCHEDULES: int | None = Field(100, ge=0)
    QUOTA_MAX_PRIORITY: int | None = Field(10, ge=-1000, le=1000)

    # MLflow (services/tracking/, docs/telemetry.md#mlflow): every job of a project tracked
    # here becomes an MLflow run on this server (http(s)://host[:port][/path], or
    # `databricks`), written by the scheduler's leader every MLFLOW_EXPORT_INTERVAL
    # seconds. "": no export. An admin sets a project's own (PUT /api/v1/projects/{name}/mlflow).
    MLFLOW_TRACKING_URI: str = ""
    MLFLOW_EXPORT_INTERVAL: float = Field(2.0, gt=0, le=3600)

    @field_validator("MLFLOW_TRACKING_URI")
    @classmethod
    def _tracking_uri(cls, value: str) -> str:
        problem = tracking_uri_problem(value)
        if problem:
            raise ValueError(f"COHORT_MLFLOW_TRACKING_URI: {problem}")
        return value.strip()

    @field_validator(
        "QUOTA_MAX_QUEUED_JOBS",
        "QUOTA_MAX_RUNNING_REPLICAS",
        "QUOTA_MAX_GPUS",
        "QUOTA_MAX_SCHEDULES",
        "QUOTA_MAX_PRIORITY",
        mode="before",
    )
    @classmethod
    def _no_limit(cls, value: object) -> object:
        # An environment variable cannot be null: an empty value or "none" means no limit.
        if isinstance(value, str) and value.strip().lower() in ("", "none", "unlimited"):
            return None
        return value

    @model_validator(mode="after")
    def _port_range_follows_its_start(self) -> Settings:
        # PORT_RANGE_START moved above the default end (as tests do with their own
        # port bases) without an end: keep the default width rather than an empty range.
        if self.PORT_RANGE_END < self.PORT_RANGE_START:
            self.PORT_RANGE_END = self.PORT_RANGE_START + 499
        return self

    @model_validator(mode="after")
    def _lock_outlasts_a_pass(self) -> Settings:
        # The leader renews its lock once a pass, and waits up to SCHEDULER_INTERVAL for
        # events between passes: a shorter lock would lapse under a healthy leader.
        if self.SCHEDULER_LOCK_TTL < 2 * self.SCHEDULER_INTERVAL:
            raise ValueError(
                f"COHORT_SCHEDULER_LOCK_TTL ({self.SCHEDULER_LOCK_TTL:g}) must be at least "
                f"twice COHORT_SCHEDULER_INTERVAL ({self.SCHEDULER_INTERVAL:g}): raise the "
                "lock's TTL or shorten the interval"
            )
        return self

    @model_validator(mode="after")
    def _lease_between_beat_and_timeout(self) -> Settings:
        # workers/node/lease.py: an agent cut off stops its replicas when its lease
        # lapses; the control plane places them elsewhere NODE_TIMEOUT after the last
        # beat. A lease as long would let two gangs of one job run at once.
        if not self.HEARTBEAT_INTERVAL < self.AGENT_LEASE < self.NODE_TIMEOUT:
            raise ValueError(
                f"COHORT_AGENT_LEASE ({self.AGENT_LEASE:g}) must be longer than "
                f"COHORT_HEARTBEAT_INTERVAL ({self.HEARTBEAT_INTERVAL:g}) and shorter than "
                f"COHORT_NODE_TIMEOUT ({self.NODE_TIMEOUT:g})"
            )
        return self

    @model_validator(mode="after")
    def _replica_uids_fit(self) -> Settings:
        # Past 2**31 - 1 some tools (and 32-bit signed APIs) misread a uid.
        if self.REPLICA_UID_BASE + self.REPLICA_UID_RANGE - 1 > 2**31 - 1:
            raise ValueError(
                f"COHORT_REPLICA_UID_BASE + COHORT_REPLICA_UID_RANGE - 1 is "
                f"{self.REPLICA_UID_BASE + self.REPLICA_UID_RANGE - 1}, past 2147483647: "
                "lower the base or the range"
            )
        return self

    @field_validator("ALLOWED_ENTRYPOINTS", mode="before")
    @classmethod
    def _split_entrypoints(cls, value: object) -> object:
        return split_list(value)  # "a.b:f,c.d:g" from the environment, or a JSON list

    @cached_property
    def data_dir(self) -> Path:
        """The absolute data directory, created on first use and kept private (0711, its
        entries 0700/0600: services/data_dir.py)."""
        return private_data_dir(self.DATA_DIR.expanduser().resolve())

    @property
    def redis_password_file(self) -> Path:
        """Where `cohort up` keeps its embedded Redis's password (mode 0600)."""
        return self.DATA_DIR.expanduser().resolve() / "redis-password"

    @property
    def redis_port_file(self) -> Path:
        """Where `cohort up` writes the port it gave its embedded Redis."""
        return self.DATA_DIR.expanduser().resolve() / "redis-port"

    @property
    def embedded_redis_port(self) -> int:
        """COHORT_EMBEDDED_REDIS_PORT if set, else the port `cohort up` chose for this
        DATA_DIR (redis-port), else 6389."""
        if "EMBEDDED_REDIS_PORT" not in self.model_fields_set:
            try:
                return int(self.redis_port_file.read_text().strip())
            except (OSError, ValueError):
                pass
        return self.EMBEDDED_REDIS_PORT

    @property
    def database_url(self) -> str:
        """The SQLAlchemy URL; the embedded default is a SQLite file under DATA_DIR."""
        return self.DATABASE_URL or f"sqlite:///{self.data_dir / 'cohort.db'}"

    @property
    def redis_url(self) -> str:
        """The Redis URL; unset means the embedded Redis on its local port, with the
        password `cohort up` keeps in DATA_DIR (none if there is none, or it cannot be
        read: a replica's process, which has no business with Redis)."""
        if self.REDIS_URL:
            return self.REDIS_URL
        try:
            password = self.redis_password_file.read_text().strip()
        except OSError:
            password = ""
        auth = f":{quote(password, safe='')}@" if password else ""
        return f"redis://{auth}127.0.0.1:{self.embedded_redis_port}/0"

    @property
    def node_id(self) -> str:
        """This agent's node id (defaults to a name derived from the host)."""
        if self.NODE_ID:
            return self.NODE_ID
        import socket

        return socket.gethostname().split(".")[0] or f"node-{secrets.token_hex(3)}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment.

    Tests and the CLI that change the environment call `get_settings.cache_clear()`.
    """
    return Settings()
