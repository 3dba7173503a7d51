"""How an agent hands a warm replica process its job: the bytes on their private channel.

The agent (workers/node/pool.py) and the warm process (workers/replica/pool_entry.py) share
one end each of a Unix socket pair the agent created when it started the process; nobody
else holds either end. Node and replica code never import each other, so the format lives
here, standard library only (the agent must never import TensorFlow).

    warm process -> agent   READY + names     TensorFlow imported, waiting; the top-level
                                              modules it holds (length, JSON list)
    agent -> warm process   HandOff + log fd  one message: length, JSON, the fd (SCM_RIGHTS)
    warm process -> agent   STARTED           it is the replica now (uid, env, log applied)
                         or FAILED + reason   it could not become it, and exits
"""

from __future__ import annotations

import json
import socket
import struct
from dataclasses import dataclass

# The variable naming the modules a warm process imports after TensorFlow, comma-separated
# (COHORT_REPLICA_POOL_PRELOAD's names): in the environment it is started with.
PRELOAD_VARIABLE = "COHORT_REPLICA_POOL_PRELOAD"

READY = b"R"
STARTED = b"S"
FAILED = b"F"

_LENGTH = struct.Struct("!I")
# The replica's environment (the job's `env` is bounded by the policy: 128 variables of
# at most 32 KiB) and a few paths: below this, which bounds what a warm process reads.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024


class HandOffError(OSError):
    """The channel closed, or carried something that is not a hand-off."""


@dataclass(frozen=True)
class HandOff:
    """What a cold spawn passes to Popen, as a warm process applies it itself."""

    env: dict[str, str]
    cwd: str
    uid: int | None  # None: stay the agent's user (an agent that is not root)
    gid: int | None
    umask: int
    # Its own /tmp and /dev/shm with these paths kept (workers/private_tmp.py); None:
    # the node's.
    private_tmp: list[str] | None = None
    # A `command` job's `python` arguments, run as that interpreter would
    # (workers/python_args.py); None: Cohort's runner.
    program: list[str] | None = None

    def encode(self) -> bytes:
        body = json.dumps(
            {
                "env": self.env,
                "cwd": self.cwd,
                "uid": self.uid,
                "gid": self.gid,
                "umask": self.umask,
                "private_tmp": self.private_tmp,
                "program": self.program,
            }
        ).encode()
        return _LENGTH.pack(len(body)) + body

    @classmethod
    def decode(cls, body: bytes) -> HandOff:
        try:
            data = json.loads(body)
            env, cwd, uid, gid = data["env"], data["cwd"], data["uid"], data["gid"]
            umask, private, program = data["umask"], data.get("private_tmp"), data.get("program")
        except (ValueError, KeyError, TypeError) as exc:
            raise HandOffError(f"malformed hand-off: {exc}") from None
        if not (
            isinstance(env, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
            and isinstance(cwd, str)
            and (uid is None) == (gid is None)
            and all(v is None or isinstance(v, int) for v in (uid, gid))
            and isinstance(umask, int)
            and (private is None or all(isinstance(p, str) for p in private))
            and (program is None or all(isinstance(a, str) for a in program))
        ):
            raise HandOffError("malformed hand-off: wrong field types")
        return cls(env, cwd, uid, gid, umask, private, program)


def ready_message(preloaded: list[str]) -> bytes:
    """READY, with the top-level module names the warm process has imported."""
    body = json.dumps(sorted(preloaded)).encode()
    return READY + _LENGTH.pack(len(body)) + body


def receive_preloaded(channel: socket.socket) -> frozenset[str]:
    """The module names that follow READY.

    Raises:
        HandOffError: the channel closed, or carried something else.
    """
    (length,) = _LENGTH.unpack(_exactly(channel, _LENGTH.size))
    if length > MAX_MESSAGE_BYTES:
        raise HandOffError(f"a module list of {length} bytes")
    try:
        names = json.loads(_exactly(channel, length))
    except ValueError as exc:
        raise HandOffError(f"malformed module list: {exc}") from None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise HandOffError("malformed module list")
    return frozenset(names)


def send(channel: socket.socket, hand_off: HandOff, log_fd: int) -> None:
    """Send `hand_off` with the replica's log descriptor attached to its first byte."""
    data = hand_off.encode()
    sent = socket.send_fds(channel, [data], [log_fd])
    if sent < len(data):
        channel.sendall(data[sent:])


def receive(channel: socket.socket) -> tuple[HandOff, int]:
    """Wait for the hand-off; returns it and the log descriptor it carried.

    Raises:
        EOFError: the agent closed its end (it retired this process, or it is gone).
        HandOffError: a message that is not a hand-off, or without a descriptor.
    """
    head, fds, _flags, _address = socket.recv_fds(channel, _LENGTH.size, 1)
    if not head:
        raise EOFError("the agent closed the channel")
    if not fds:
        raise HandOffError("a hand-off without the log descriptor")
    head += _exactly(channel, _LENGTH.size - len(head))
    (length,) = _LENGTH.unpack(head)
    if length > MAX_MESSAGE_BYTES:
        raise HandOffError(f"a hand-off of {length} bytes")
    return HandOff.decode(_exactly(channel, length)), fds[0]


def _exactly(channel: socket.socket, count: int) -> bytes:
    chunks, left = [], count
    while left:
        chunk = channel.recv(min(left, 1 << 16))
        if not chunk:
            raise HandOffError("the channel closed in the middle of a hand-off")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
