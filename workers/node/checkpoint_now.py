""" "Checkpoint now": the agent's side of a drain (services/cluster/drains.py).

The control plane sends a `CheckpointReplica` to the agent of each replica of a gang that
has a replica on a drained node; the agent sends SIGUSR1 to that replica's process group
(its guard ignores it, the program handles it: workers/node/guard.py), or through the
engine to its container. The replica saves into $COHORT_CHECKPOINT_DIR and exits 75; the
chief's checkpoint directory is synced to the store before that exit is reported
(workers/node/sidecar.py), so the next attempt, wherever it is placed, restores it.
A replica not running here (not started, or already gone) is left alone: the drain's
grace settles it.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import TYPE_CHECKING

from services.wire.replica import CheckpointReplica
from workers.node import containers
from workers.node.launcher import ReplicaKey

if TYPE_CHECKING:
    from workers.node.agent import Agent

log = logging.getLogger("cohort.agent")


def ask(agent: Agent, message: CheckpointReplica) -> bool:
    """Send SIGUSR1 to replica (job, attempt, index) if it runs here; whether it was sent."""
    key = ReplicaKey(message.job_id, message.attempt, message.index)
    with agent.lock:
        process = agent.processes.get(key)
        if process is not None:
            # Its exit 75 ends it: a parameter_server worker is not started again in place.
            agent.respawns.stopping(key)
    if process is None:
        log.info("asked to checkpoint %s, which does not run here: nothing to do", key)
        return False
    if process.container is not None:
        sent = containers.send_signal(process.container, "USR1")
    else:
        try:  # started with start_new_session: the group id is the leader's pid
            os.killpg(process.popen.pid, signal.SIGUSR1)
            sent = True
        except ProcessLookupError:  # it has just exited: its exit is reported anyway
            sent = False
    log.info("asked %s to checkpoint now (SIGUSR1)%s", key, "" if sent else ": it was gone")
    return sent
