"""A replica's own /tmp and /dev/shm: a mount namespace with a fresh tmpfs on each, as
systemd's PrivateTmp gives a service, so what one job leaves in /tmp is never in another's
way (a `/tmp/backup` of an earlier run, owned by another uid) nor in its sight.

The agent, when root, starts each replica through this module as a program:

    python -I -m workers.private_tmp --uid U --gid G --env-fd N [--keep PATH ...] -- ARGV

which, still root and before anything of the job runs: makes a mount namespace of its own
(mounts there reach no other process: propagation private), mounts a tmpfs on /tmp and
/dev/shm (empty, mode 1777, gone with the replica), binds back at their own paths the
`--keep` paths that lie under them (the interpreter, Cohort's code and DATA_DIR, where a
node keeps them under /tmp: a checkout or a test's directory), drops to U:G with no
supplementary groups, and execs ARGV with the environment read from descriptor N.

The root part runs with an empty environment and `-I` (no PYTHON* variables, no user site,
no current directory on sys.path): the job's environment, which its owner writes
(LD_PRELOAD, PYTHONPATH), reaches only the process that runs as the job's uid.

Each replica has its own: the replicas of a job on one node are like processes on
separate hosts, the way TensorFlow's multi-worker tutorials are written. A warm process of
the replica pool (workers/node/pool.py) is started through `--namespace-only` (the
namespace, nothing mounted, no user change: it is the agent's until handed a job) and
mounts its own at the hand-off (`mount_private`), before it becomes the job's user.

Standard library only, shared by node and replica code (as workers/handoff.py).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from collections.abc import Sequence

PRIVATE = ("/tmp", "/dev/shm")  # noqa: S108 - the paths made private, not temporary files

_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str) -> None:
    def raw(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    _check(
        _libc().mount(raw(source), raw(target), raw(fstype), flags, raw(data or None)),
        f"mount {target}",
    )


def new_namespace() -> None:
    """Move this process into a mount namespace of its own, whose mounts propagate to
    nowhere. Call it while the process has a single thread (a thread keeps the old one).

    Raises:
        OSError: EPERM without CAP_SYS_ADMIN (not root, or a container without it).
    """
    _check(_libc().unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE, "")


def _under_private(path: str) -> bool:
    return any(path == top or path.startswith(top + "/") for top in PRIVATE)


def kept(paths: Sequence[str]) -> list[str]:
    """The absolute, resolved `paths` that lie under a private directory, none inside
    another (binding the outer one brings the inner along)."""
    resolved = sorted(
        {os.path.realpath(p) for p in paths if p} | {os.path.abspath(p) for p in paths if p}
    )
    chosen: list[str] = []
    for path in resolved:
        if _under_private(path) and not any(path.startswith(c + "/") for c in chosen):
            chosen.append(path)
    return chosen


def mount_private(keep: Sequence[str]) -> None:
    """In this process's own mount namespace (`new_namespace`): a fresh tmpfs on /tmp and
    /dev/shm, with each of `keep` under them bound back at its path. The stubs the binds
    need are made on the fresh tmpfs, where nothing of any job can have been planted.

    Raises:
        OSError: this process was not started in a namespace of its own.
    """
    if os.environ.get(OWN_NAMESPACE) != "1":
        raise OSError("not in a mount namespace of its own: /tmp left as it is")
    held = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in kept(keep)]
    try:
        for target in PRIVATE:
            if os.path.isdir(target):
                _mount("tmpfs", target, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
        mask = os.umask(0o022)  # every stub passable, the replica's umask is 077
        try:
            for path, fd in held:
                os.makedirs(path, exist_ok=True)
                _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC, "")
        finally:
            os.umask(mask)
    finally:
        for _path, fd in held:
            os.close(fd)


# Set by `--namespace-only` in what it runs: the process is in a mount namespace of its
# own, where `mount_private` may mount (never in the node's own: it would cover its /tmp).
OWN_NAMESPACE = "COHORT_OWN_MOUNT_NAMESPACE"


def namespace_only_argv(python: str, argv: list[str]) -> list[str]:
    """`argv` run in a mount namespace of its own, nothing mounted, as the same user."""
    return [python, "-I", "-m", "workers.private_tmp", "--namespace-only", "--", *argv]


def probe_argv(python: str) -> list[str]:
    """The command that checks whether this node can give replicas private directories:
    exit 0 if it can, else non-zero with why on stderr (run it as the agent's user)."""
    return [python, "-I", "-m", "workers.private_tmp", "--probe"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="workers.private_tmp")
    parser.add_argument("--uid", type=int)
    parser.add_argument("--gid", type=int)
    parser.add_argument("--env-fd", type=int)
    parser.add_argument("--keep", action="append", default=[])
    parser.add_argument("--namespace-only", action="store_true")
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.probe:
        new_namespace()
        os.environ[OWN_NAMESPACE] = "1"
        mount_private([])
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command to run is needed after --")
    env = dict(os.environ)
    if args.env_fd is not None:
        with os.fdopen(args.env_fd, "rb") as source:
            env = json.loads(source.read())
    cwd = os.getcwd()
    new_namespace()
    if args.namespace_only:
        env[OWN_NAMESPACE] = "1"
    else:
        os.environ[OWN_NAMESPACE] = "1"
        mount_private(args.keep)
    if args.uid is not None and args.gid is not None:
        os.setgroups([])
        os.setresgid(args.gid, args.gid, args.gid)
        os.setresuid(args.uid, args.uid, args.uid)
    os.chdir(cwd)  # the same directory, seen through this namespace's mounts
    os.execve(command[0], command, env)
    return 127  # pragma: no cover - execve does not return


if __name__ == "__main__":  # pragma: no cover - run by the agent as a program
    try:
        sys.exit(main(sys.argv[1:]))
    except OSError as exc:
        sys.stderr.write(f"cohort: cannot give this replica its own /tmp: {exc}\n")
        sys.exit(126)
