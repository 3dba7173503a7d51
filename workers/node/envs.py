"""A node's job environments: one virtualenv per (replica interpreter, requirements digest),
built once, reused by every later job with the same requirements, evicted least recently
used first.

    DATA_DIR/envs/                 agent  0711  replicas pass through, list nothing
    DATA_DIR/envs/<key>/           agent  0755  a finished environment (its mtime: last used)
    DATA_DIR/envs/<key>.size       agent        its bytes, for the cache's bound
    DATA_DIR/envs/.locks/<key>     agent  0700  flock'd while <key> is built or evicted
    DATA_DIR/envs/.build-<key>-*/  build uid    a build in progress: env/, home/, tmp/

`<key>` is the sha256 of the interpreter's path and the requirements' digest
(services/wire/requirements.py): another interpreter is another environment.

Why a `.pth` and not `--system-site-packages`: the node's replica interpreter is usually a
virtualenv itself, and a virtualenv made from it with `--system-site-packages` sees the
base Python's packages, not the node virtualenv's (TensorFlow, tf-keras, Cohort). The
environment's `_cohort_node.pth` adds the node interpreter's site directories (with their
own .pth files: an editable install of Cohort) after its own, so the job's packages come
first and TensorFlow, Keras and Cohort stay the node's: pip runs with a constraints file
pinning them at the node's versions, so a package that wants another fails to install
rather than replacing them.

A build runs under the key's flock (two jobs wanting it: one builds, the other waits and
then uses it), into a build directory renamed into place only once pip has succeeded; a
failed or interrupted build leaves nothing another job would use. pip runs with the
node's pip settings (PIP_* variables of the agent, /etc/pip.conf; --no-cache-dir) and,
when the agent is root, as an unprivileged build uid below every replica uid
(envs_build.py): a package's setup.py runs as that uid, never as root, and nothing it
started outlives the build.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from services.wire.requirements import package_count, requirements_digest
from workers.node import envs_build

log = logging.getLogger("cohort.agent.envs")

RequirementsFailed = envs_build.RequirementsFailed


def envs_dir(data_dir: Path) -> Path:
    """This node's environments (DATA_DIR/envs, 0711: replicas run their interpreters)."""
    return Path(data_dir) / "envs"


def env_key(python: str, lines: list[str]) -> str:
    """The name of the environment of `lines` over the interpreter `python`."""
    return hashlib.sha256(f"{python}\0{requirements_digest(lines)}".encode()).hexdigest()[:32]


class EnvCache:
    """The environments of one node, bounded by `max_bytes` (COHORT_ENV_CACHE_BYTES)."""

    def __init__(self, data_dir: Path, python: str, max_bytes: int, build_uid: int | None) -> None:
        self.root = envs_dir(data_dir)
        self.python = python
        self.max_bytes = max_bytes
        self.build_uid = build_uid  # None: pip runs as the agent's user
        self.marks: dict[str, str] = {}  # the agent's marks, set on the build's processes
        self._in_use: Counter[str] = Counter()
        self._lock = threading.Lock()

    def interpreter(self, key: str) -> str:
        return str(self.root / key / "bin" / "python")

    def ensure(
        self, lines: list[str], log_file: IO[str], announce: Callable[[str], None] | None = None
    ) -> str:
        """The interpreter of the environment of `lines`, built first if need be (pip's
        output to `log_file`, after a first line saying how many packages). The caller
        `release`s it once its replica has ended; until then it is never evicted.
        `announce` is told "installing N packages: ..." when it must be built (or waited
        for: another job's build of it).

        Raises:
            RequirementsFailed: pip failed (the message: its last error lines).
            OSError: the disk refused a write (ENOSPC: the node's disk is full).
        """
        key = env_key(self.python, lines)
        with self._lock:
            self._in_use[key] += 1
        try:
            self._ensure(key, lines, log_file, announce)
        except BaseException:
            self.release(key)
            raise
        return self.interpreter(key)

    def _ensure(
        self,
        key: str,
        lines: list[str],
        log_file: IO[str],
        announce: Callable[[str], None] | None,
    ) -> None:
        count = package_count(lines)
        done = self.root / key
        if not done.is_dir():
            note = f"installing {count} package{'s' if count != 1 else ''}: {', '.join(lines)}"
            log_file.write(f"cohort: {note}\n")
            log_file.flush()
            if announce is not None:
                announce(note[:300])
        with self._locked(key):
            if done.is_dir():
                log_file.write(f"cohort: using the environment of {count} packages ({key})\n")
            else:
                started = time.monotonic()
                self._build(key, lines, log_file)
                log_file.write(
                    f"cohort: installed {count} packages in {time.monotonic() - started:.1f}s\n"
                )
            log_file.flush()
            os.utime(done)  # last used: what eviction goes by
        self.evict(keep=key)

    def release(self, key_or_python: str) -> None:
        """One replica that used this environment (its key or interpreter) has ended."""
        key = Path(key_or_python).parent.parent.name if "/" in key_or_python else key_or_python
        with self._lock:
            self._in_use[key] -= 1
            if self._in_use[key] <= 0:
                del self._in_use[key]

    @contextmanager
    def _locked(self, key: str, *, wait: bool = True) -> Iterator[bool]:
        locks = self.root / ".locks"
        locks.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        fd = os.open(locks / key, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def _build(self, key: str, lines: list[str], log_file: IO[str]) -> None:
        build = Path(envs_build.make_build_dir(self.root, key))  # .build-<key>-<random>
        try:
            env = build / "env"
            envs_build.make_venv(self.python, env, site_dirs(self.python))
            (build / "requirements.txt").write_text("\n".join(lines) + "\n")
            (build / "constraints.txt").write_text("\n".join(node_pins(self.python)) + "\n")
            envs_build.chown_tree(build, self.build_uid)
            envs_build.run_pip(build, self.build_uid, log_file, self.marks)
            envs_build.seal(env, self.root / key)
            (self.root / f"{key}.size").write_text(str(tree_bytes(self.root / key)))
        finally:
            shutil.rmtree(build, ignore_errors=True)

    def evict(self, keep: str = "") -> list[str]:
        """Remove the least recently used environments, never one in use nor `keep`,
        until the cache holds at most `max_bytes`; returns the keys removed."""
        envs = []
        for size_file in self.root.glob("*.size"):
            key = size_file.name.removesuffix(".size")
            try:
                envs.append((os.stat(self.root / key).st_mtime, key, int(size_file.read_text())))
            except (OSError, ValueError):
                continue
        total = sum(size for _, _, size in envs)
        removed = []
        for _, key, size in sorted(envs):
            if total <= self.max_bytes:
                break
            with self._lock:
                used = self._in_use[key] > 0
            if used or key == keep:
                continue
            with self._locked(key, wait=False) as locked:
                if not locked:
                    continue  # being built or used by a build right now
                gone = self.root / f".evicted-{key}-{os.getpid()}"
                os.rename(self.root / key, gone)
                (self.root / f"{key}.size").unlink(missing_ok=True)
                shutil.rmtree(gone, ignore_errors=True)
            total -= size
            removed.append(key)
            log.info("evicted environment %s (%d bytes)", key, size)
        return removed


@functools.cache
def site_dirs(python: str) -> tuple[str, ...]:
    """The site directories of the interpreter `python` (asked of it, once)."""
    script = "import site, sys; print('\\n'.join(site.getsitepackages()))"
    done = subprocess.run(  # noqa: S603 - an argv, never a shell
        [python, "-I", "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return tuple(line for line in done.stdout.splitlines() if line)


@functools.cache
def node_pins(python: str) -> tuple[str, ...]:
    """`name==version` of each protected package (TensorFlow, Keras, Cohort...) that
    `python` has: the constraints every environment over it is built with."""
    from services.wire.requirements import PROTECTED

    script = (
        "import importlib.metadata as m, sys\n"
        "for name in sys.argv[1:]:\n"
        "    try: print(f'{name}=={m.version(name)}')\n"
        "    except m.PackageNotFoundError: pass\n"
    )
    done = subprocess.run(  # noqa: S603 - an argv, never a shell
        [python, "-I", "-c", script, *sorted(PROTECTED)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return tuple(line for line in done.stdout.splitlines() if line)


def tree_bytes(root: Path) -> int:
    """The bytes of the files under `root` (links not followed)."""
    total = 0
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total
