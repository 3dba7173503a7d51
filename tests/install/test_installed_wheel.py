"""Installed = tested: Cohort's wheel, installed (not editable) with its `worker` extra in a
fresh virtualenv outside the source tree, migrates a PostgreSQL database as its owner,
then from another directory runs `cohort up` as the services' restricted role, trains a
2-replica job to success and passes `cohort health` for each service: what the images do
(`pip install` of the wheel, `cohort migrate`, then the processes), without a container
engine.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from cohort.client import Client
from tests.conftest import PG_ADMIN_URL, drop_database, redis_url
from tests.e2e.conftest import PORT_BASE, free_port, wait_for, wait_terminal

# COHORT_BOOTSTRAP_TOKEN: an admin token needs at least 32 characters.
INSTALL_TOKEN = "install-bootstrap-token-for-tests-only"

ROOT = Path(__file__).resolve().parents[2]
# What the Dockerfile's wheel stage copies: the wheel is built from these alone.
SOURCES = ["pyproject.toml", "README.md", "alembic", "api", "services", "workers", "cli", "cohort"]
ROLE_SCRIPT = ROOT / "deploy" / "postgres" / "10-cohort-role.sh"

# The first test also builds and installs (the module's fixture): minutes on a busy machine.
pytestmark = pytest.mark.timeout(2400)

# The dependencies are installed from a wheelhouse: every wheel the worker extra resolves
# to, downloaded once per set of pins and kept in the user's cache. A plain `pip install`
# of the wheel took 6.5 minutes on the shared 2-core machine (load 8-12): pip keeps no
# cache of the index's TensorFlow wheels there, so each run fetched 850 MB again. From the
# wheelhouse, `--no-index`, pip resolves the same pins from the same files: the wheel's
# build, the virtualenv and the install took 3.5 minutes (load 8-15), 4.2 when the
# wheelhouse was made in the same run; unpacking TensorFlow is most of it. The wheelhouse
# is named by what the worker extra installs, so a new pin makes a new one.
WHEELHOUSES = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cohort-test"


def run(
    argv: list[str | Path], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900
) -> str:
    """Run to completion; fail with its output unless it exits 0."""
    result = subprocess.run(
        [str(arg) for arg in argv],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"{argv} exited {result.returncode}:\n{result.stdout}"
    return result.stdout


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that would put the source tree or the development
    virtualenv on the path."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("COHORT_", "PYTHON", "VIRTUAL_ENV", "PYTEST"))
    }
    return {**env, **extra}


def build_wheel(workdir: Path) -> Path:
    source = workdir / "source"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(
                path, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(path, source / name)
    dist = workdir / "dist"
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", dist, source],
        cwd=workdir,
    )
    (wheel,) = dist.glob("cohort-*.whl")
    return wheel


def installed_extra(requirement: str) -> bool:
    """Whether a Requires-Dist line is installed with the worker extra (the base, `worker`
    and the `node` it names), so that a change to `dev` or `gpu` keeps the wheelhouse."""
    _, _, marker = requirement.partition(";")
    return "extra ==" not in marker or any(
        f'extra == "{name}"' in marker for name in ("worker", "node")
    )


def wheelhouse_for(wheel: Path, workdir: Path) -> Path:
    """The wheels of the worker extra's dependencies, downloaded once per set of pins."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        requires = sorted(
            line
            for line in archive.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:") and installed_extra(line)
        )
    key = hashlib.sha256("\n".join(requires).encode()).hexdigest()[:16]
    house = WHEELHOUSES / f"wheelhouse-py{sys.version_info[0]}{sys.version_info[1]}-{key}"

    def download(partial: Path) -> None:
        run(
            [sys.executable, "-m", "pip", "wheel", "--wheel-dir", partial, f"{wheel}[worker]"],
            cwd=workdir,
            timeout=1800,
        )
        for own in partial.glob("cohort-*.whl"):
            own.unlink()  # the wheel under test is always the one just built
        # Other pins' (a GiB each), once unused for a day: not one another run may be using.
        for stale in [*WHEELHOUSES.glob("wheelhouse-*"), *WHEELHOUSES.glob("dependencies-*")]:
            if stale != partial and time.time() - stale.stat().st_mtime > 86400:
                shutil.rmtree(stale, ignore_errors=True)

    return cached(house, download)


def cached(path: Path, make: Callable[[Path], None]) -> Path:
    """`path`, made by `make` into a directory of its own first if no run completed it
    (renamed into place whole: a run interrupted midway leaves nothing that looks done)."""
    if not (path / ".complete").exists():
        partial = path.with_name(path.name + f".partial-{os.getpid()}")
        make(partial)
        (partial / ".complete").touch()
        if (path / ".complete").exists():  # another run made it meanwhile
            shutil.rmtree(partial)
        else:
            shutil.rmtree(path, ignore_errors=True)  # an interrupted one's leftovers
            partial.rename(path)
    os.utime(path)  # last used now
    return path


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def pip_install(venv: Path, wheel: Path, house: Path, workdir: Path) -> str:
    # --no-compile: TensorFlow's thousands of modules are not byte-compiled ahead, as the
    # images' install does; Python compiles what it imports, so what runs is the same.
    return run(
        [
            venv / "bin" / "python",
            "-m",
            "pip",
            "install",
            "--no-compile",
            "--no-index",
            "--find-links",
            house,
            f"{wheel}[worker]",
        ],
        cwd=workdir,
        env=clean_env(),
        timeout=1200,
    )


def dependencies_for(wheel: Path, house: Path, workdir: Path) -> Path:
    """The worker extra's dependencies installed from `house` (without Cohort), once per
    wheelhouse: their site-packages. Unpacking TensorFlow was most of every run's install
    (70-100 s of the module's 3 minutes); what is under test is Cohort's own wheel, which
    every run installs afresh beside this layer."""
    layer = house.with_name(house.name.replace("wheelhouse-", "dependencies-", 1))

    def install(partial: Path) -> None:
        run([sys.executable, "-m", "venv", partial], cwd=workdir)
        pip_install(partial, wheel, house, workdir)
        run(
            [partial / "bin" / "python", "-m", "pip", "uninstall", "--yes", "cohort"],
            cwd=workdir,
            env=clean_env(),
        )

    return site_packages(cached(layer, install))


def reachable_by_replicas(path: Path) -> None:
    """o+x (enter, not list) on `path`'s directories, as deploy/replica_access.py gives the
    interpreter's: as root, the replicas run as their job's own uid."""
    if os.geteuid() != 0:
        return
    for directory in [path, *path.parents]:
        mode = directory.stat().st_mode
        if not mode & stat.S_IXOTH:
            directory.chmod(mode | stat.S_IXOTH)


@pytest.fixture(scope="module")
def installed(replicas_tmp_root: Path) -> Path:
    """A virtualenv with Cohort's wheel and its worker extra; returns its bin directory
    (where the replicas it starts, as their job's uid, can run it).

    The dependencies come from a layer made once per set of pins (`dependencies_for`), on
    the new virtualenv's path through a `.pth` file; pip resolves the wheel's whole
    `[worker]` requirement against it (a dependency the layer lacks would be installed
    here from the wheelhouse, or fail the install) and installs Cohort itself, not
    editable, into the new virtualenv alone."""
    workdir = replicas_tmp_root / "install"
    workdir.mkdir(mode=0o711)
    assert not workdir.resolve().is_relative_to(ROOT)
    wheel = build_wheel(workdir)
    house = wheelhouse_for(wheel, workdir)
    dependencies = dependencies_for(wheel, house, workdir)
    reachable_by_replicas(dependencies)
    venv = workdir / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=workdir)
    # A site directory of the new environment's, its own .pth files read as at install.
    (site_packages(venv) / "cohort-test-dependencies.pth").write_text(
        f"import site; site.addsitedir({str(dependencies)!r})\n"
    )
    output = pip_install(venv, wheel, house, workdir)
    assert "Successfully installed cohort-" in output, output
    return venv / "bin"


@contextlib.contextmanager
def database_with_service_role() -> Iterator[tuple[str, str]]:
    """An empty database owned by the admin user (who migrates) and the services' role made
    by the same script as the postgres container's: (owner URL, service URL)."""
    name = f"cohort_install_{free_port()}"
    role = f"{name}_svc"
    password = uuid.uuid4().hex
    admin_url = make_url(PG_ADMIN_URL)
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    owner = admin_url.set(database=name)
    try:
        run(
            ["sh", ROLE_SCRIPT],
            cwd=ROOT,
            env={
                **os.environ,
                "PGHOST": admin_url.host or "127.0.0.1",
                "PGPORT": str(admin_url.port or 5432),
                "PGPASSWORD": admin_url.password or "",
                "POSTGRES_USER": admin_url.username or "postgres",
                "POSTGRES_DB": name,
                "COHORT_DB_USER": role,
                "COHORT_DB_PASSWORD": password,
            },
        )
        service = owner.set(username=role, password=password)
        yield (
            owner.render_as_string(hide_password=False),
            service.render_as_string(hide_password=False),
        )
    finally:
        drop_database(name)
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP ROLE IF EXISTS "{role}"'))
        admin.dispose()


def test_services_are_the_installed_ones(installed: Path, tmp_path: Path) -> None:
    probe = (
        "import sys, services, cli.stack; print(services.__file__); "
        "print(cli.stack.migrations_directory()); print(sys.path)"
    )
    lines = run([installed / "python", "-c", probe], cwd=tmp_path, env=clean_env()).splitlines()
    site = (installed.parent / "lib").resolve()
    assert Path(lines[0]).resolve().is_relative_to(site), lines[0]
    migrations = Path(lines[1]).resolve()
    assert migrations.is_relative_to(site) and (migrations / "env.py").is_file(), lines[1]
    assert str(ROOT) not in lines[2], lines[2]


@pytest.mark.e2e
def test_installed_cohort_migrates_starts_and_trains(installed: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cohort = installed / "cohort"
    with database_with_service_role() as (owner_url, service_url):
        out = run([cohort, "migrate"], cwd=elsewhere, env=clean_env(COHORT_DATABASE_URL=owner_url))
        assert "newest migration" in out
        service = sa.create_engine(service_url)
        with service.connect() as connection:
            assert connection.execute(sa.text("SELECT count(*) FROM jobs")).scalar() == 0
            # The role reads and writes rows and may not change the schema.
            with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
                connection.execute(sa.text("CREATE TABLE intruder (id integer)"))
        service.dispose()

        bus_url = redis_url("install")
        redis.Redis.from_url(bus_url).flushdb()
        port = free_port()
        env = clean_env(
            COHORT_DATABASE_URL=service_url,
            COHORT_REDIS_URL=bus_url,
            COHORT_DATA_DIR=str(tmp_path / "data"),
            COHORT_API_PORT=str(port),
            COHORT_BOOTSTRAP_TOKEN=INSTALL_TOKEN,
            COHORT_NODE_ID="installed",
            COHORT_PORT_RANGE_START=PORT_BASE,
        )
        log = tmp_path / "cohort-up.log"
        with open(log, "wb") as out_file:
            up = subprocess.Popen(
                [str(cohort), "up"],
                cwd=elsewhere,
                env=env,
                stdout=out_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            client = Client(f"http://127.0.0.1:{port}", INSTALL_TOKEN)

            def node_ready() -> bool:
                assert up.poll() is None, log.read_text()
                try:
                    return any(n["status"] == "ready" for n in client.nodes())
                except Exception:  # noqa: BLE001 - not listening yet
                    return False

            wait_for(node_ready, 180, "the installed stack's agent to be ready", interval=1)
            job = client.submit(
                {
                    "name": "installed",
                    "trainer": "mlp_digits",
                    "strategy": "multi_worker_mirrored",
                    "replicas": 2,
                    "hyperparameters": {"epochs": 2, "steps_per_epoch": 10},
                },
                idempotency_key="installed-1",
            )
            job = wait_terminal(client, job["id"], timeout=300)
            assert job["status"] == "succeeded", (job["reason"], log.read_text()[-4000:])
            assert job["reason"] == "all 2 replicas exited 0"
            replica_log = (
                tmp_path / "data" / "jobs" / str(job["id"]) / "logs" / "attempt-1" / "replica-0.log"
            ).read_text()
            assert "num_replicas_in_sync=2" in replica_log
            # The images' healthchecks, from the installed package with the services' settings.
            for service in ("api", "scheduler", "agent"):
                run([cohort, "health", service], cwd=elsewhere, env=env, timeout=60)
        finally:
            if up.poll() is None:
                up.send_signal(signal.SIGTERM)  # `cohort up` stops its children, then exits
            try:
                code = up.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
                up.wait()
                raise
        assert code == 0, log.read_text()[-4000:]
