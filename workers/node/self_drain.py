"""SIGTERM to the agent (a host shutting down, a spot notice forwarded: docs/operations.md):
the node is drained before the agent exits, so its gangs checkpoint and move instead of
losing what they did since their last checkpoint.

On the first SIGTERM while replicas run here the agent tells the control plane
(`NodeDraining`, an event: the scheduler wakes on it), which cordons the node and asks
every gang with a replica here to checkpoint now (services/cluster/drains.py: SIGUSR1 to
the replicas, here and on the gangs' other nodes). The agent keeps consuming its queue
meanwhile (the checkpoint messages come through it), and once every replica here has
exited and its exit is reported (its checkpoint synced first: workers/node/sidecar.py), or
DRAIN_GRACE and a margin have passed, it stops as SIGTERM always stopped it (Celery's warm
shutdown, then Agent.shutdown for anything left). A second SIGTERM, or one with nothing
running, stops it at once.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, Any

import redis

from services.wire.client import publish_node_event
from services.wire.events import NodeDraining

if TYPE_CHECKING:
    from workers.node.agent import Agent

log = logging.getLogger("cohort.agent")

# Past DRAIN_GRACE, how long the agent still waits: the control plane's pass that stops
# the gang, and its stop message's way here.
MARGIN = 10.0
POLL = 0.2
# The threads that end with a replica's exit reported (agent.py names them so).
_ENDING = ("watch-", "prepare-")


class SelfDrain:
    """The agent's SIGTERM handler: drain this node, then stop."""

    def __init__(self, agent: Agent, grace: float) -> None:
        self.agent = agent
        self.grace = grace
        self.previous: Any = signal.SIG_DFL
        self.thread: threading.Thread | None = None

    def install(self) -> None:
        """Take SIGTERM over from Celery's handler (which it calls in the end); a signal
        handler can only be set from the main thread."""
        if threading.current_thread() is not threading.main_thread():
            log.warning("SIGTERM is not drained: the worker did not start on the main thread")
            return
        previous = signal.getsignal(signal.SIGTERM)
        if isinstance(getattr(previous, "__self__", None), SelfDrain):
            return  # the worker was ready again (a new connection): installed already
        self.previous = previous
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def busy(self) -> bool:
        """Whether a replica runs here, or its end is still being reported."""
        with self.agent.lock:
            if self.agent.processes or self.agent.preparing:
                return True
        return any(t.name.startswith(_ENDING) and t.is_alive() for t in threading.enumerate())

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if self.thread is None and self.busy():
            self.thread = threading.Thread(target=self.drain, daemon=True, name="self-drain")
            self.thread.start()
            return
        if callable(self.previous):
            self.previous(signum, frame)
        else:  # no handler before ours: what SIGTERM does by default
            raise SystemExit(128 + signum)

    def drain(self) -> None:
        """Tell the control plane, wait for the replicas here to end, then stop."""
        node = self.agent.node_id
        log.warning(
            "SIGTERM: draining node %s before stopping (its replicas checkpoint and move; "
            "at most %.0fs)",
            node,
            self.grace + MARGIN,
        )
        deadline = time.monotonic() + self.grace + MARGIN
        event = NodeDraining(node, "it received SIGTERM", time.time())
        while time.monotonic() < deadline:
            try:
                publish_node_event(self.agent.redis, event, self.agent.node_key)
                break
            except redis.RedisError as exc:  # Redis away: try again until the deadline
                log.warning("could not tell the control plane of the drain: %s", exc)
                time.sleep(1.0)
        while time.monotonic() < deadline and self.busy():
            time.sleep(POLL)
        if self.busy():
            log.warning("the drain's grace ran out: stopping what still runs here")
        else:
            log.info("node %s drained: every replica here has exited; stopping", node)
        os.kill(os.getpid(), signal.SIGTERM)  # the handler passes it on to Celery's
