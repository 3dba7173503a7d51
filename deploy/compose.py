"""Start and stop docker-compose.yml on this host: `make compose-up`, `make compose-down`.

    python3 deploy/compose.py up
    python3 deploy/compose.py down [--volumes]

Standard library only, as deploy/images.py (which `up` runs first). `up`:

- needs a Docker daemon and a compose implementation that honours the file's
  `depends_on` conditions and healthchecks: `docker compose` (v2) where installed, else
  `docker-compose` (1.29, Debian's). Where no daemon answers and this is root with `dockerd`
  installed, it starts one (its log in var/compose/dockerd.log);
- generates the secrets once into var/compose/secrets.env (0600; never committed), and
  the agents' node keys from the signing key, as `cohort node-key` derives them;
- builds the images (`make images`), and where the third-party images (postgres, redis,
  minio) cannot be pulled, the stand-ins of deploy/standins, added by compose.standins.yaml;
- starts the stack detached and returns once the api answers /readyz, printing its address
  and the admin token, which it keeps in var/compose/token (0600).

A second `up` on a running stack changes nothing; a port already taken by anything else
fails with one line naming it. `down` stops and removes the containers, keeping the
volumes unless `--volumes`.

Settings (environment): COHORT_COMPOSE_PORT (8000: the api on 127.0.0.1), COHORT_COMPOSE_DIR
(var/compose), COHORT_COMPOSE_PROJECT (cohort: container and volume names), COHORT_COMPOSE_FILES
(more compose files, `:`-separated, after the others), COHORT_COMPOSE_NODES (agent-1: the
node ids that get a Redis password and a node key).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import images  # noqa: E402 - deploy/images.py, beside this file

ROOT = images.ROOT
STANDINS = ROOT / "deploy" / "standins"
STANDIN_IMAGE = "cohort-standins:latest"
# What docker-compose.yml pulls, and the file that replaces each where none can be.
THIRD_PARTY = ("postgres:16.10-bookworm", "redis:7.4.6-bookworm")
READY_TIMEOUT_S = 600.0
DOCKERD_START_S = 60.0
# One value per name, made once: passwords go inside URLs, so hex only.
SECRETS = (
    "POSTGRES_PASSWORD",
    "COHORT_DB_PASSWORD",
    "REDIS_PASSWORD",
    "COHORT_SIGNING_KEY",
    "COHORT_BOOTSTRAP_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
)


class ComposeError(SystemExit):
    """Ends `make compose-up` with one line saying what to do."""

    def __init__(self, line: str) -> None:
        super().__init__(f"compose: {line}")


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def setting(name: str, default: str) -> str:
    return os.environ.get(name) or default


def state_dir() -> Path:
    return Path(setting("COHORT_COMPOSE_DIR", str(ROOT / "var" / "compose")))


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read, never readable by others in between."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(path, 0o600)


def nodes() -> list[str]:
    return [node for node in setting("COHORT_COMPOSE_NODES", "agent-1").split(",") if node]


def env_name(node: str) -> str:
    return node.upper().replace("-", "_")


def secrets_env(port: int) -> dict[str, str]:
    """The stack's variables: the secrets kept in secrets.env (made once; a value added
    later is appended), the node keys derived from the signing key, the api's address."""
    path = state_dir() / "secrets.env"
    kept: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name, sep, value = line.partition("=")
            if sep and not name.startswith("#"):
                kept[name] = value
    wanted = list(SECRETS) + [f"REDIS_AGENT_PASSWORD_{env_name(node)}" for node in nodes()]
    for name in wanted:
        kept.setdefault(name, secrets.token_hex(32 if name != "AWS_ACCESS_KEY_ID" else 10))
    write_private(path, "".join(f"{name}={value}\n" for name, value in kept.items()))
    derived = dict(kept)
    for node in nodes():
        key = hmac.new(
            kept["COHORT_SIGNING_KEY"].encode(), f"node:{node}".encode(), hashlib.sha256
        ).hexdigest()
        derived[f"COHORT_NODE_KEY_{env_name(node)}"] = key
    derived["COHORT_NODE_KEY"] = derived[f"COHORT_NODE_KEY_{env_name(nodes()[0])}"]
    derived["COHORT_API_PUBLISH"] = f"127.0.0.1:{port}"
    return derived


def docker_daemon() -> None:
    """A Docker daemon that answers; started here when none does and we may."""
    if images.docker_answers():
        return
    if shutil.which("dockerd") is None or os.geteuid() != 0:
        raise ComposeError(
            "no Docker daemon answers (`docker info`): start one (the compose stack needs "
            "Docker's healthchecks; README, 'Running with containers')"
        )
    log = state_dir() / "dockerd.log"
    log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    say(f"starting dockerd (its log: {log})")
    with log.open("ab") as out:
        subprocess.Popen(  # noqa: S603 - a fixed command
            ["dockerd"], stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True
        )
    deadline = time.monotonic() + DOCKERD_START_S
    while not images.docker_answers():
        if time.monotonic() > deadline:
            raise ComposeError(f"dockerd did not answer within {DOCKERD_START_S:.0f} s: see {log}")
        time.sleep(1)


def compose_command() -> list[str]:
    """`docker compose` (v2) where present, else Debian's `docker-compose` (1.29)."""
    v2 = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    if v2.returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise ComposeError("no compose: install Docker Compose v2, or Debian's docker-compose")


def compose_files(standins: bool) -> list[str]:
    files = [str(ROOT / "docker-compose.yml")]
    if standins:
        files.append(str(ROOT / "compose.standins.yaml"))
    files += [f for f in setting("COHORT_COMPOSE_FILES", "").split(":") if f]
    return [argument for file in files for argument in ("--file", file)]


def project() -> str:
    return setting("COHORT_COMPOSE_PROJECT", "cohort")


def compose(standins: bool, *arguments: str, env: dict[str, str], **kwargs: object) -> str:
    command = [
        *compose_command(),
        "--project-name",
        project(),
        "--project-directory",
        str(ROOT),
        *compose_files(standins),
        *arguments,
    ]
    done = subprocess.run(  # noqa: S603 - our own arguments
        command, env={**os.environ, **env}, text=True, capture_output=True, check=False, **kwargs
    )
    if done.returncode != 0:
        raise ComposeError(
            f"`{' '.join(command[:2])} {' '.join(arguments)}` failed:\n{done.stderr}"
        )
    return done.stdout


def need_standins() -> bool:
    """Whether the third-party images can be neither found nor pulled (then: stand-ins)."""
    return not all(
        images.image_exists("docker", ref) or images.pulled("docker", ref) for ref in THIRD_PARTY
    )


def build_standins() -> None:
    base, how = images.choose_base("docker", os.environ.get("PYTHON_IMAGE"))
    say(f"stand-ins: {STANDIN_IMAGE} on {base} ({how})")
    command, env = images.build_command("docker")
    subprocess.run(
        [*command, "--quiet", "--build-arg", f"BASE={base}", "--tag", STANDIN_IMAGE, str(STANDINS)],
        env={**os.environ, **env},
        check=True,
        stdout=subprocess.DEVNULL,
    )


def api_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def running_services(standins: bool, env: dict[str, str]) -> set[str]:
    out = compose(standins, "ps", "--services", "--filter", "status=running", env=env)
    return set(out.split())


def wait_ready(port: int, standins: bool, env: dict[str, str]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not api_ready(port):
        if time.monotonic() > deadline:
            logs = compose(standins, "logs", "--tail", "30", env=env)
            raise ComposeError(
                f"the api did not answer /readyz in {READY_TIMEOUT_S:.0f} s:\n{logs}"
            )
        time.sleep(1)


def stack_state() -> dict[str, object]:
    """What the last `up` decided (state.json): the port, the project, stand-ins or not."""
    path = state_dir() / "state.json"
    return dict(json.loads(path.read_text())) if path.exists() else {}


def up() -> int:
    port = int(setting("COHORT_COMPOSE_PORT", "8000"))
    docker_daemon()
    env = secrets_env(port)
    known = stack_state().get("standins")
    if known is not None and api_ready(port) and "api" in running_services(bool(known), env):
        say(f"compose: already up: http://127.0.0.1:{port}")
        return report(port, env, bool(known))
    if not port_free(port):
        raise ComposeError(
            f"127.0.0.1:{port} is in use by another program: free it or set COHORT_COMPOSE_PORT"
        )
    started = time.monotonic()
    env_images = {**os.environ, "COHORT_ENGINE": "docker"}
    subprocess.run([sys.executable, str(ROOT / "deploy" / "images.py")], env=env_images, check=True)
    standins = bool(known) if known is not None else need_standins()
    if standins:
        build_standins()
    compose(standins, "up", "--detach", "--no-build", env=env)
    wait_ready(port, standins, env)
    say(f"compose: up in {time.monotonic() - started:.0f} s: http://127.0.0.1:{port}")
    return report(port, env, standins)


def report(port: int, env: dict[str, str], standins: bool) -> int:
    token = state_dir() / "token"
    write_private(token, env["COHORT_BOOTSTRAP_TOKEN"] + "\n")
    state = {"port": port, "project": project(), "standins": standins}
    write_private(state_dir() / "state.json", json.dumps(state) + "\n")
    say(f"api: http://127.0.0.1:{port}")
    say(f"admin token: {env['COHORT_BOOTSTRAP_TOKEN']} (kept in {token})")
    return 0


def down(volumes: bool) -> int:
    if not images.docker_answers():
        say("compose: no Docker daemon answers: nothing runs")
        return 0
    env = secrets_env(int(setting("COHORT_COMPOSE_PORT", "8000")))
    compose(
        bool(stack_state().get("standins")), "down", *(["--volumes"] if volumes else []), env=env
    )
    say(f"compose: down{' (volumes removed)' if volumes else ' (volumes kept)'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("up", help="build, start, wait until the api is ready")
    stop = sub.add_parser("down", help="stop and remove the containers")
    stop.add_argument("--volumes", action="store_true", help="also remove the volumes")
    arguments = parser.parse_args(argv)
    if arguments.verb == "up":
        return up()
    return down(arguments.volumes)


if __name__ == "__main__":
    sys.exit(main())
