"""How this node reports the end of a replica: its exit code, sent until the scheduler has it.

A replica ends in one of three ways, each reported as a `ReplicaExited` event: its
process exited (`exited`), it was refused before anything ran (`refused`: policy,
port, bundle, spawn failure), or it was stopped before it started (`never_started`).
Exit codes are remembered for a while and repeated in the heartbeat, for exits whose
event Redis lost.
"""

from __future__ import annotations

import errno
import logging
import threading
import time

import redis

from services import exit_codes
from services.wire.client import publish_node_event
from services.wire.events import ReplicaExited
from workers.node.launcher import ReplicaKey

log = logging.getLogger("cohort.agent")

# How long exit codes stay in the heartbeat (for exits whose event Redis lost).
EXITED_MEMORY = 600.0
# Exit codes of replicas this agent could not start, reported as their exits so the
# job moves on under its restart policy (services/exit_codes.py classifies them).
# A replica refused because another process holds its port: outside the
# program's control, so worth another attempt, on which placement skips the
# ports this node reported busy.
PORT_TAKEN_EXIT = 138
# A process that could not be started. As a shell reports it: 127, the interpreter
# (or the job's directory) is not found; 126, found but not executable, or refused for
# anything else (E2BIG, EACCES, a spec file it cannot write). Both are permanent: the
# same spec fails the same way. A node out of processes, memory or files says 138
# instead: another attempt may well start; out of disk, NO_SPACE_EXIT, which names it.
SPAWN_NOT_FOUND_EXIT = 127
SPAWN_FAILED_EXIT = 126
# Refused before anything ran, and permanent: the node's policy forbids what the
# message asks (a forged or stale message), or the bundle is missing or corrupt.
POLICY_REFUSED_EXIT = 126
BUNDLE_REFUSED_EXIT = 126
# The store or the disk failed while fetching: the node's trouble, worth another attempt.
FETCH_FAILED_EXIT = PORT_TAKEN_EXIT
# Claimed by this node's previous agent, which was killed before it reported the start:
# whatever that agent started is gone (run_agent ends a predecessor's processes before
# it consumes), but the start cannot be told apart from a redelivered copy, so this
# attempt is ended and the restart policy decides; left alone, the claim refused every
# re-sent start and the gang waited for good (the chaos soak found one).
INTERRUPTED_START_EXIT = PORT_TAKEN_EXIT
# DATA_DIR full (ENOSPC) while laying out, fetching or starting: what the runner says
# of a replica whose own writes failed so (services/exit_codes.py names it once).
NO_SPACE_EXIT = exit_codes.NO_SPACE
# Stopped before it started: what SIGTERM would have given.
STOPPED_EXIT = 143
_NODE_EXHAUSTED = frozenset({errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE})


def exit_code_of(returncode: int) -> int:
    """Popen's -N for 'killed by signal N' as the shell's 128+N (137 = SIGKILL)."""
    return 128 - returncode if returncode < 0 else returncode


def spawn_exit_code(error: Exception) -> int:
    """The exit code reported for a replica whose process could not be started."""
    if isinstance(error, FileNotFoundError):
        return SPAWN_NOT_FOUND_EXIT
    if exit_codes.is_no_space(error):
        return NO_SPACE_EXIT
    if isinstance(error, OSError) and error.errno in _NODE_EXHAUSTED:
        return PORT_TAKEN_EXIT
    return SPAWN_FAILED_EXIT


def fetch_exit_code(error: Exception) -> int:
    """The exit code reported for a replica whose code or inputs could not be fetched."""
    return NO_SPACE_EXIT if exit_codes.is_no_space(error) else FETCH_FAILED_EXIT


class ExitReports:
    """The exits of one node's replicas: published as events, remembered for the heartbeat."""

    def __init__(
        self, node_id: str, node_key: str, client: redis.Redis, lock: threading.Lock
    ) -> None:
        self.node_id = node_id
        self.node_key = node_key  # signs each report (services/wire/signing.py)
        self.redis = client
        self.lock = lock  # the agent's: `recent` is read under it by the heartbeat
        self.recent: dict[ReplicaKey, tuple[int, float]] = {}  # code, when

    def exited(self, key: ReplicaKey, code: int, log_tail: str) -> None:
        """Report a replica whose process exited with `code`."""
        log.info("%s exited with %d", key, code)
        self._remember(key, code)
        self.publish_until_sent(
            ReplicaExited(
                self.node_id,
                key.job_id,
                key.attempt,
                key.index,
                code,
                time.time(),
                log_tail=log_tail,
            )
        )

    def refused(self, key: ReplicaKey, code: int, why: str) -> None:
        """Report a replica that could not be started here, with the reason for a person."""
        log.error("not starting %s: %s", key, why)
        self._remember(key, code)
        self.publish_until_sent(
            ReplicaExited(
                self.node_id,
                key.job_id,
                key.attempt,
                key.index,
                code,
                time.time(),
                log_tail=f"cohort agent on {self.node_id}: {why}; replica not started",
                never_started=True,
            )
        )

    def never_started(self, key: ReplicaKey, *, until_sent: bool) -> None:
        """Report a replica stopped before its process started (nothing ran)."""
        event = ReplicaExited(
            self.node_id,
            key.job_id,
            key.attempt,
            key.index,
            STOPPED_EXIT,
            time.time(),
            never_started=True,
        )
        if until_sent:
            self.publish_until_sent(event)
        else:
            publish_node_event(self.redis, event, self.node_key)

    def recent_codes(self, now: float) -> tuple[tuple[int, int, int, int], ...]:
        """(job, attempt, index, code) of the exits still remembered (lock held)."""
        for key in [k for k, (_, at) in self.recent.items() if now - at > EXITED_MEMORY]:
            del self.recent[key]
        return tuple((k.job_id, k.attempt, k.index, code) for k, (code, _) in self.recent.items())

    def note(self, key: ReplicaKey, code: int) -> None:
        """Remember an exit for the heartbeat, the agent's lock held: in the same hold
        that takes the replica off the running list, so that no heartbeat lists it as
        neither running nor exited (the control plane would call it lost)."""
        self.recent[key] = (code, time.time())

    def _remember(self, key: ReplicaKey, code: int) -> None:
        with self.lock:
            self.note(key, code)

    def publish_until_sent(self, event: ReplicaExited) -> None:
        # An exit must reach the scheduler even across a Redis restart; the
        # heartbeat's `exited` list covers the case where this still fails.
        deadline = time.monotonic() + 300
        while True:
            try:
                publish_node_event(self.redis, event, self.node_key)
                return
            except redis.RedisError as exc:
                if time.monotonic() > deadline:
                    log.error("could not report %s: %s", event, exc)
                    return
                time.sleep(1.0)
