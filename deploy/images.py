"""Build Cohort's images from the one Dockerfile: `make images` (`GPU=1` adds gpu-worker).

    python3 deploy/images.py [--gpu]

Standard library only, so it runs before any virtualenv exists. It prints one line for the
engine it chose, one for the base, then each image with its size and build time.

- The engine: `COHORT_ENGINE` (docker or podman), else docker when its daemon answers,
  else podman.
- The base (the Dockerfile's `PYTHON_IMAGE`): `PYTHON_IMAGE` from the environment as given;
  else the Dockerfile's pinned slim image when it is present or can be pulled; else a local
  base made from Debian's packages with mmdebstrap (Python 3.11, venv, pip, `python` on
  PATH: the slim image's layout) and imported. That base is tagged with a digest of what
  it contains (suite, sources, packages, the host's CA bundle) and made once.
- The network: the local base carries the host's CA bundle, and podman's builds also mount
  /etc/ssl/certs read-only, so that builds reach PyPI and Debian where only the host's
  bundle is trusted. Nothing of the host's pip configuration (its index mirrors) goes in.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
ENGINES = ("docker", "podman")
IMAGES = ("control", "worker")
GPU_IMAGES = ("gpu-worker",)
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PULL_TIMEOUT_S = 300

BASE_NAME = "localhost/cohort-python-base"
BASE_SUITE = "bookworm"
BASE_SOURCES = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
# python-is-python3: `python` on PATH, as in the slim image; passwd: useradd for the
# service user (minbase has only the essential packages).
BASE_PACKAGES = (
    "python3",
    "python3-venv",
    "python3-pip",
    "python-is-python3",
    "ca-certificates",
    "passwd",
)
# Documentation and translations stay out, as in Debian's slim images.
BASE_DPKG_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
)
# An imported tarball has no configuration: what the slim image's would give.
BASE_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["python3"]',
)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def pinned_base() -> str:
    """The Dockerfile's default PYTHON_IMAGE (the one place it is pinned)."""
    found = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE)
    if found is None:
        raise SystemExit(f"{DOCKERFILE}: no `ARG PYTHON_IMAGE=...` line")
    return found[1]


def docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        probe = subprocess.run(["docker", "info"], capture_output=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return False
    return probe.returncode == 0


def choose_engine(chosen: str | None) -> tuple[str, str]:
    """The engine and why it was chosen."""
    if chosen:
        if chosen not in ENGINES:
            raise SystemExit(f"COHORT_ENGINE={chosen!r}: one of {', '.join(ENGINES)}")
        if shutil.which(chosen) is None:
            raise SystemExit(f"COHORT_ENGINE={chosen}, but `{chosen}` is not on PATH")
        return chosen, "COHORT_ENGINE"
    if docker_answers():
        return "docker", "its daemon answers"
    if shutil.which("podman") is not None:
        why = "docker's daemon does not answer" if shutil.which("docker") else "no docker"
        return "podman", why
    raise SystemExit("no container engine: install docker or podman (see .ci/run)")


def image_exists(engine: str, ref: str) -> bool:
    probe = subprocess.run(
        [engine, "image", "inspect", ref], capture_output=True, timeout=60, check=False
    )
    return probe.returncode == 0


def pulled(engine: str, ref: str) -> bool:
    try:
        pull = subprocess.run(
            [engine, "pull", ref], capture_output=True, timeout=PULL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return False
    return pull.returncode == 0


def base_key() -> str:
    """A digest of everything the local base is made of."""
    recipe = {
        "suite": BASE_SUITE,
        "sources": BASE_SOURCES,
        "packages": BASE_PACKAGES,
        "dpkg": BASE_DPKG_OPTIONS,
        "changes": BASE_CHANGES,
        "ca_bundle": hashlib.sha256(CA_BUNDLE.read_bytes()).hexdigest(),
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def make_base(engine: str, ref: str) -> None:
    """mmdebstrap a minimal Debian with Python, venv and pip; import it as `ref`."""
    if shutil.which("mmdebstrap") is None:
        raise SystemExit("the local base needs mmdebstrap (apt-get install mmdebstrap)")
    with tempfile.TemporaryDirectory(prefix="cohort-base-") as scratch:
        tarball = Path(scratch) / "base.tar"
        command = [
            "mmdebstrap",
            "--variant=minbase",
            "--quiet",
            f"--include={','.join(BASE_PACKAGES)}",
            *(f"--dpkgopt={option}" for option in BASE_DPKG_OPTIONS),
            # The host's bundle, so that builds from this base trust what the host trusts.
            f"--customize-hook=copy-in {CA_BUNDLE} {CA_BUNDLE.parent}",
            BASE_SUITE,
            str(tarball),
            *BASE_SOURCES,
        ]
        subprocess.run(command, check=True)
        changes = [argument for change in BASE_CHANGES for argument in ("--change", change)]
        subprocess.run([engine, "import", *changes, str(tarball), ref], check=True)


def choose_base(engine: str, given: str | None) -> tuple[str, str]:
    """The PYTHON_IMAGE to build on and why."""
    if given:
        return given, "PYTHON_IMAGE"
    pinned = pinned_base()
    if image_exists(engine, pinned):
        return pinned, "the pinned slim image, present"
    if pulled(engine, pinned):
        return pinned, "the pinned slim image, pulled"
    ref = f"{BASE_NAME}:{base_key()}"
    why = f"{pinned} cannot be pulled"
    if image_exists(engine, ref):
        return ref, f"made from Debian {BASE_SUITE}'s packages earlier; {why}"
    started = time.monotonic()
    make_base(engine, ref)
    took = time.monotonic() - started
    return ref, f"made from Debian {BASE_SUITE}'s packages in {took:.0f} s; {why}"


def build_options(engine: str) -> list[str]:
    if engine == "podman":
        # SHELL needs the docker format (OCI images have none); the build's steps use the
        # host's network and trust its CA bundle.
        return [
            "--format",
            "docker",
            "--network",
            "host",
            "--volume",
            "/etc/ssl/certs:/etc/ssl/certs:ro",
        ]
    return []


def image_size(engine: str, ref: str) -> int:
    inspected = subprocess.run(
        [engine, "image", "inspect", "--format", "{{.Size}}", ref],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(inspected.stdout.split()[0])


def docker_clients() -> list[str]:
    """Every `docker` on PATH, in PATH's order."""
    found = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder) / "docker"
        if os.access(candidate, os.X_OK) and str(candidate) not in found:
            found.append(str(candidate))
    return found


def build_command(engine: str) -> tuple[list[str], dict[str, str]]:
    """The build command and its environment. Docker builds with BuildKit, which builds only
    the stages a target needs (the legacy builder builds every stage before it: the worker
    would cost gpu-worker's 3 GB of CUDA wheels): `docker buildx build` where the plugin
    is, else a client with BuildKit inside (before 23, as Debian bookworm's docker.io)."""
    if engine == "podman":
        return ["podman", "build"], {}
    clients = docker_clients()
    for client in clients:
        probe = subprocess.run([client, "buildx", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return [client, "buildx", "build", "--load"], {}
    for client in clients:
        version = subprocess.run(
            [client, "version", "--format", "{{.Client.Version}}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if version and int(version.split(".")[0]) < 23:
            return [client, "build"], {"DOCKER_BUILDKIT": "1"}
    raise SystemExit(
        "docker cannot build with BuildKit here: install the buildx plugin "
        "(docker-buildx-plugin), or use podman (COHORT_ENGINE=podman)"
    )


def build(engine: str, base: str, target: str, tag: str) -> str:
    ref = f"cohort-{target}:{tag}"
    started = time.monotonic()
    command, env = build_command(engine)
    subprocess.run(
        [
            *command,
            *build_options(engine),
            "--file",
            str(DOCKERFILE),
            "--target",
            target,
            "--build-arg",
            f"PYTHON_IMAGE={base}",
            "--tag",
            ref,
            str(ROOT),
        ],
        env={**os.environ, **env},
        check=True,
    )
    took = time.monotonic() - started
    say(f"image: {ref} {image_size(engine, ref) / 1e6:.0f} MB (built in {took:.0f} s)")
    return ref


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--gpu", action="store_true", help="also build gpu-worker (~3 GB)")
    arguments = parser.parse_args(argv)
    engine, why = choose_engine(os.environ.get("COHORT_ENGINE"))
    say(f"engine: {engine} ({why})")
    base, how = choose_base(engine, os.environ.get("PYTHON_IMAGE"))
    say(f"base: {base} ({how})")
    tag = os.environ.get("COHORT_VERSION") or "latest"
    built = [build(engine, base, target, tag) for target in IMAGES]
    if arguments.gpu:
        built += [build(engine, base, target, tag) for target in GPU_IMAGES]
    sizes = ", ".join(f"{ref} {image_size(engine, ref) / 1e6:.0f} MB" for ref in built)
    say(f"images: {sizes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
