"""Who a replica runs as on this node, and who owns each of its job's files.

An agent running as root runs each job's replicas as a uid and gid of the job's own,
REPLICA_UID_BASE + job id % REPLICA_UID_RANGE (no /etc/passwd entry needed): never
root, no supplementary groups, umask 077. A uid per job, rather than one replica user
for all, is what keeps one job's replicas out of another's files on a shared node, and
lets the agent end every process a job left behind (`reap`) by its uid alone. An agent
that is not root cannot change user: its replicas run as its own user (docs/security.md
says what that leaves open).

The job's directory (workers/layout.py) with the job's uid and gid U:

    jobs/                         agent        0711  replicas pass through, list nothing
    jobs/<job>/                   agent:U      1770  the job's replicas read and write
                                                     (sticky: what the agent made there
                                                     stays the agent's)
        checkpoints/ model/ tmp/  U:U          0700  written by the replicas (tmp: TMPDIR)
        tensorboard/              agent:U      0750
            replica-<i>/          U:U          0700
        inputs/                   agent:U      0750  fetched by the agent, read-only
            model/ holdout/ ...   agent:U      0750  an evaluation job's (share_directory)
        logs/                     agent        0700  the replica writes its log through
                                                     the descriptor it is given
        attempt-<n>/              agent:U      0750
            replica-<i>/          U:U          0700  work dir and HOME: spec, code, metrics

The job's directory is the replicas' to write too, as the README promises (TensorFlow's
Keras tutorial writes a worker's copy of the model next to the model directory): its
sticky bit keeps every entry the agent made there (logs/, inputs/, tensorboard/,
attempt-<n>/) from being renamed or removed by a replica, and an entry the agent is about
to make that a replica made first (a link, say, named as the next attempt) is removed and
made again as the agent's (`_directory`). Every other directory a replica can write is a
leaf in a directory only the agent can write; what the agent reads from the replicas'
own directories it reads through OwnedTree (no link followed, the owner checked), and it
hands a tree over (`hand_over`) through directory descriptors that follow no link.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.settings import Settings
from workers import layout, private_tmp
from workers.node import leftovers

log = logging.getLogger("cohort.isolation")

REPLICA_UMASK = 0o077  # what a replica creates is its job's alone


@dataclass(frozen=True)
class ReplicaUser:
    """The uid and gid a job's replicas run as on this node; `private_tmp`: each replica
    gets its own /tmp and /dev/shm (workers/private_tmp.py)."""

    uid: int
    gid: int
    private_tmp: bool = False


@functools.cache
def private_tmp_refusal(python: str) -> str | None:
    """None if this node can give replicas their own /tmp and /dev/shm (a mount
    namespace: root with CAP_SYS_ADMIN), else why not. Asked once, of a child process."""
    if not is_root():
        return "the agent is not root"
    try:
        done = subprocess.run(  # noqa: S603 - an argv, never a shell
            private_tmp.probe_argv(python),
            capture_output=True,
            env={"PATH": os.defpath},
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if done.returncode == 0:
        return None
    said = done.stderr.decode(errors="replace").strip().splitlines()
    return said[-1] if said else f"exit {done.returncode}"


def is_root() -> bool:
    return os.geteuid() == 0


def replica_user(settings: Settings, job_id: int) -> ReplicaUser | None:
    """Job `job_id`'s replica user, or None when the agent is not root (its replicas
    then run as the agent's own user, with the node's /tmp)."""
    if not is_root():
        return None
    uid = settings.REPLICA_UID_BASE + int(job_id) % settings.REPLICA_UID_RANGE
    python = settings.REPLICA_PYTHON or sys.executable
    private = settings.REPLICA_PRIVATE_TMP and private_tmp_refusal(python) is None
    return ReplicaUser(uid, uid, private)


def popen_options(user: ReplicaUser | None) -> dict[str, Any]:
    """subprocess.Popen's arguments that make a child run as `user`."""
    if user is None:
        return {"umask": REPLICA_UMASK}
    return {"user": user.uid, "group": user.gid, "extra_groups": [], "umask": REPLICA_UMASK}


def _directory(path: Path, owner: int, group: int, mode: int) -> None:
    """Make `path` a directory owned by owner:group with `mode` (never through a link).
    Anything else found there (a link), or one of the agent's own (`owner` is this
    process's uid) that a replica made first in the job's directory, which it can write,
    is removed and made again."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        found = None
    if found is not None and (
        not stat.S_ISDIR(found.st_mode) or (owner == os.geteuid() and found.st_uid != owner)
    ):
        log.warning("%s was not a directory of its owner's: made again", path)
        if stat.S_ISDIR(found.st_mode):
            shutil.rmtree(path)  # never follows a link inside
        else:
            path.unlink()
    path.mkdir(exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        if is_root():
            os.fchown(fd, owner, group)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def lay_out(
    data_dir: Path, job_id: int, attempt: int, index: int, user: ReplicaUser | None
) -> None:
    """Create (or fix) the directories of replica `index` of `attempt` with the owners
    and modes above; without a replica user, the agent's own, the job's tree 0700."""
    agent = os.geteuid(), os.getegid()
    u, g = (user.uid, user.gid) if user else agent
    shared = 0o750 if user else 0o700
    paths = layout.ReplicaPaths.of(data_dir, job_id, attempt, index)
    jobs = paths.job_dir.parent
    jobs.mkdir(parents=True, exist_ok=True)
    _directory(jobs, *agent, 0o711)
    _directory(paths.job_dir, agent[0], g, 0o1770 if user else 0o700)
    for private in (paths.checkpoint_dir, paths.model_dir, paths.tmp_dir):
        _directory(private, u, g, 0o700)
    tensorboard = paths.tensorboard_dir
    _directory(tensorboard.parent, agent[0], g, shared)
    _directory(tensorboard, u, g, 0o700)
    _directory(paths.input_dir, agent[0], g, shared)
    _directory(paths.log_dir.parent, *agent, 0o700)
    _directory(paths.log_dir, *agent, 0o700)
    work = paths.work_dir
    _directory(work.parent, agent[0], g, shared)
    _directory(work, u, g, 0o700)


def lay_out_pool(pool: layout.PoolDirs) -> None:
    """The warm replica processes' directory, with their HOME and TMPDIR: the agent's
    alone (0700). They run as the agent's user until a hand-off makes each a job's
    replica (workers/node/pool.py); what they left there stays out of every job's reach."""
    agent = os.geteuid(), os.getegid()
    pool.root.parent.mkdir(parents=True, exist_ok=True)
    for path in (pool.root, pool.home, pool.tmp):
        _directory(path, *agent, 0o700)


def share_read_only(path: Path, user: ReplicaUser | None) -> None:
    """Make a file the agent wrote (a fetched input) readable by the job's replicas and
    writable by none of them: agent:U 0640. The store writes it 0600 (a temporary file
    renamed into place), which a replica running as U could not read. Through a
    descriptor opened without following links; the directory it is in (`inputs/`) is
    the agent's, so no replica can put a link there anyway."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if user is not None:
            os.fchown(fd, os.geteuid(), user.gid)
        os.fchmod(fd, 0o640 if user is not None else 0o600)
    finally:
        os.close(fd)


def share_directory(path: Path, user: ReplicaUser | None) -> None:
    """A directory of files the agent fetched for the job (an evaluation's model and
    holdout, under `inputs/`): agent:U 0750, which the replicas read and cannot write."""
    _directory(path, os.geteuid(), user.gid if user else os.getegid(), 0o750 if user else 0o700)


def retire(job_dir: Path) -> None:
    """A finished job's directory becomes the agent's alone (its saved model and logs
    stay for downloads): no later job that shares its uid can read it."""
    if job_dir.is_dir():
        _directory(job_dir, os.geteuid(), os.getegid(), 0o700)


def hand_over(root: Path, user: ReplicaUser | None) -> None:
    """Give everything under the directory `root` to `user` (what the agent wrote there:
    the code, the spec, a restored checkpoint). Walks directory descriptors and never
    follows a link, so a replica of the job that swaps a directory for a link meanwhile
    cannot make the agent change any file outside `root`."""
    if user is None or not root.is_dir():
        return
    for _dirpath, dirnames, filenames, dir_fd in os.fwalk(root, follow_symlinks=False):
        for name in (*dirnames, *filenames):
            try:
                os.chown(name, user.uid, user.gid, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed meanwhile (a checkpoint rotated out)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchown(fd, user.uid, user.gid)
    finally:
        os.close(fd)


def reap(user: ReplicaUser | None, node_id: str, data_dir: Path) -> int:
    """SIGKILL every process still running as `user` that this agent's replicas started
    (what a job's replicas left behind: a daemon outside their process group); returns
    how many.

    Only processes whose environment carries this agent's marks (environment.agent_marks:
    the node's id and the agent's DATA_DIR, which every replica gets and its children
    inherit): another agent on the same host (a second node, a test stack, even one under
    the same node id) may run a job whose uid is the same number, and its replicas are not
    ours to end. A process that empties its own environment escapes this
    (docs/security.md).
    """
    if user is None:
        return 0
    killed = len(leftovers.kill(list(leftovers.marked(node_id, data_dir, user.uid))))
    if killed:
        log.warning("killed %d processes left behind by uid %d", killed, user.uid)
    return killed


class IsolationUnavailable(RuntimeError):
    """This node cannot run replicas as their own users; the message says what to fix."""


def check_node(settings: Settings, python: str) -> None:
    """As root: check that a replica's uid can run the replica interpreter and Cohort's
    code and write under DATA_DIR/jobs (user namespaces map only some uids; a DATA_DIR
    or an interpreter under a 0700 home is unreachable), so a misconfigured node fails at
    start with the fix rather than failing every replica.

    Raises:
        IsolationUnavailable: saying which check failed and what to set.
    """
    if not is_root():
        return
    if settings.REPLICA_PRIVATE_TMP and (refusal := private_tmp_refusal(python)) is not None:
        log.warning(
            "replicas share this node's /tmp and /dev/shm (%s): a mount namespace needs "
            "CAP_SYS_ADMIN; COHORT_REPLICA_PRIVATE_TMP=false says this is meant",
            refusal,
        )
    jobs = layout.jobs_dir(settings.data_dir).absolute()
    jobs.mkdir(parents=True, exist_ok=True)
    _directory(jobs, os.geteuid(), os.getegid(), 0o711)
    last = settings.REPLICA_UID_BASE + settings.REPLICA_UID_RANGE - 1
    probe = Path(tempfile.mkdtemp(prefix=".probe-", dir=jobs))
    try:
        for uid in (settings.REPLICA_UID_BASE, last):
            try:
                os.chown(probe, uid, uid)
            except OSError as exc:
                raise IsolationUnavailable(
                    f"cannot give files to uid {uid} ({exc}): this node's user namespace "
                    "does not map it; set COHORT_REPLICA_UID_BASE and COHORT_REPLICA_UID_RANGE "
                    "to a span it maps"
                ) from None
        script = "import sys, workers.replica.runner; open(sys.argv[1] + '/written', 'w').close()"
        try:
            done = subprocess.run(  # noqa: S603 - an argv, never a shell
                [python, "-P", "-c", script, str(probe)],
                cwd="/",
                capture_output=True,
                env={"PATH": os.defpath, "HOME": str(probe)},
                timeout=120,
                **popen_options(ReplicaUser(last, last)),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            done = None
            why = str(exc)
        if done is None or done.returncode != 0 or not (probe / "written").is_file():
            if done is not None:
                why = done.stderr.decode(errors="replace").strip()[-600:]
            raise IsolationUnavailable(
                f"a replica running as uid {last} cannot run {python} with Cohort's code "
                f"and write in {jobs} ({why}): every directory above them must be "
                "searchable by other users (mode o+x), or set COHORT_REPLICA_PYTHON to an "
                "interpreter they can run"
            )
    finally:
        shutil.rmtree(probe, ignore_errors=True)
