"""One environment's build (workers/node/envs.py): its directory, its virtualenv, pip run
as the build uid with the node's pip settings, and the finished tree sealed as the agent's.

The build uid (COHORT_REPLICA_UID_BASE - 1, `build_uid`) is below every replica uid, so
no job's replicas share it; a package's setup.py runs as it, not as root, and writes only
the build's own directory. Whatever it started is killed once pip has ended (found by the
build's mark in its environment), and the tree becomes the agent's, readable by all,
writable by none, before any replica runs it.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import stat
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

import psutil

from workers.node import leftovers

log = logging.getLogger("cohort.agent.envs")

# pip's settings that pass from the agent to the build (the index, certificates,
# proxies); /etc/pip.conf applies as well. Nothing else of the agent's environment does.
PASSED = ("PATH", "LANG", "LC_ALL", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")
PASSED_PREFIXES = ("PIP_",)
PROXIES = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
BUILD_TIMEOUT = 1800.0  # seconds pip may take before the build fails
ERROR_LINES = 6  # of pip's output, in the replica's failure reason
PTH = "_cohort_node.pth"


class RequirementsFailed(RuntimeError):
    """pip could not install a job's requirements: its last error lines. Permanent: the
    same requirements fail the same way on any attempt."""


def build_uid(replica_uid_base: int) -> int:
    """The uid pip runs as when the agent is root: just below the replicas' uids."""
    return replica_uid_base - 1


def make_build_dir(root: Path, key: str) -> str:
    """A new build directory for `key` under `root` (with home/ and tmp/)."""
    root.mkdir(mode=0o711, parents=True, exist_ok=True)
    build = tempfile.mkdtemp(prefix=f".build-{key}-", dir=root)
    for name in ("home", "tmp"):
        os.mkdir(os.path.join(build, name), 0o700)
    return build


def make_venv(python: str, env: Path, site_dirs: tuple[str, ...]) -> None:
    """A virtualenv without pip at `env` whose `_cohort_node.pth` adds the node
    interpreter's site directories after its own (envs.py says why not
    --system-site-packages)."""
    subprocess.run(  # noqa: S603 - an argv, never a shell
        [python, "-I", "-m", "venv", "--without-pip", str(env)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (site,) = env.glob("lib/python*/site-packages")
    # addsitedir, not a bare path: the node's own .pth files (an editable install) run too.
    lines = [f"import site; site.addsitedir({path!r})" for path in site_dirs]
    (site / PTH).write_text("\n".join(lines) + "\n")


def chown_tree(root: Path, uid: int | None) -> None:
    """Give `root` and everything under it to `uid` (None: leave it), no link followed."""
    if uid is None:
        return
    for _dirpath, dirnames, filenames, dir_fd in os.fwalk(root, follow_symlinks=False):
        for name in (*dirnames, *filenames):
            os.chown(name, uid, uid, dir_fd=dir_fd, follow_symlinks=False)
    os.chown(root, uid, uid, follow_symlinks=False)


def _pip_env(build: Path, marks: dict[str, str]) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if name in PASSED or name in PROXIES or name.startswith(PASSED_PREFIXES)
    }
    env.setdefault("PATH", os.defpath)
    return {
        **env,
        **marks,
        "HOME": str(build / "home"),
        "TMPDIR": str(build / "tmp"),
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
        "COHORT_ENV_BUILD": str(build),  # what finds its leftovers
    }


def run_pip(build: Path, uid: int | None, log_file: IO[str], marks: dict[str, str]) -> None:
    """pip install the build's requirements.txt (constrained by constraints.txt) into its
    env/, as `uid` (None: as the agent), its output into `log_file`.

    Raises:
        RequirementsFailed: pip exited non-zero or ran past BUILD_TIMEOUT.
    """
    python = str(build / "env" / "bin" / "python")
    argv = [python, "-m", "pip", "install", "--no-cache-dir", "--progress-bar", "off"]
    argv += ["-r", "requirements.txt", "-c", "constraints.txt"]
    user: dict[str, Any] = {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}
    last: collections.deque[str] = collections.deque(maxlen=200)
    with subprocess.Popen(  # noqa: S603 - an argv, never a shell
        argv,
        cwd=build,
        env=_pip_env(build, marks),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
        umask=0o022,
        **user,
    ) as pip:
        # Its output is read on a thread until pip itself exits: a process it started
        # that keeps the pipe open (a daemon) must not hold the build past pip's end.
        reader = threading.Thread(target=_copy, args=(pip.stdout, log_file, last), daemon=True)
        reader.start()
        try:
            code = pip.wait(timeout=BUILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            code = -signal.SIGKILL
        _end_leftovers(pip.pid, build)
        reader.join(timeout=10)
    if code != 0:
        errors = [line for line in last if line.startswith("ERROR:")] or list(last)
        said = "\n".join(errors[-ERROR_LINES:]) or "(no output)"
        why = "ran past its time" if code == -signal.SIGKILL else f"exited {code}"
        raise RequirementsFailed(f"pip could not install the job's requirements ({why}): {said}")


def _copy(stream: IO[str] | None, log_file: IO[str], last: collections.deque[str]) -> None:
    for line in stream or ():
        last.append(line.rstrip("\n"))
        log_file.write(line)
        log_file.flush()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _end_leftovers(pid: int, build: Path) -> None:
    """Kill whatever the build started that is still running (pip itself past its time):
    its process group, and any process that left it but still carries the build's mark."""
    _kill_group(pid)
    marked = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("COHORT_ENV_BUILD") == str(build):
                marked.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    if leftovers.kill(marked):
        log.warning("killed %d processes a build of %s left running", len(marked), build.name)


def seal(env: Path, final: Path) -> None:
    """Make the built `env` the agent's (readable by all, writable by none but it), point
    its scripts at `final`, and rename it there."""
    agent_uid, agent_gid = os.geteuid(), os.getegid()
    # The build uid's processes are all gone (run_pip): nothing swaps an entry meanwhile.
    for _dirpath, dirnames, filenames, dir_fd in os.fwalk(env, follow_symlinks=False):
        for name in (*dirnames, *filenames):
            os.chown(name, agent_uid, agent_gid, dir_fd=dir_fd, follow_symlinks=False)
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode) or (stat.S_ISREG(mode) and mode & 0o100):
                os.chmod(name, 0o755, dir_fd=dir_fd)
            elif stat.S_ISREG(mode):
                os.chmod(name, 0o644, dir_fd=dir_fd)
    os.chown(env, agent_uid, agent_gid)
    os.chmod(env, 0o755)
    _repoint_scripts(env, final)
    os.rename(env, final)


def _repoint_scripts(env: Path, final: Path) -> None:
    """Console scripts pip wrote name the build's interpreter in their #! line."""
    old, new = f"#!{env}/bin/".encode(), f"#!{final}/bin/".encode()
    for script in (env / "bin").iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        data = script.read_bytes()
        if data.startswith(old):
            script.write_bytes(new + data[len(old) :])
