"""Starting a lost parameter_server worker again, in place: the one place that decides.

ParameterServerStrategy tolerates losing a worker: the chief's ClusterCoordinator
retries the closures it ran on other workers and takes the worker back once a
server answers at its address again. So the agent that ran the worker starts it
again, under the same (job, attempt, index), port and log file, instead of reporting
its exit: no gang restart, and the fencing stays the claim this node already holds
for that key. It reports each restart as a `ReplicaRestarted` event and writes a
line into the replica's log. After PS_WORKER_RESTARTS restarts the next exit is
reported as usual, and the control plane restarts the gang (services/cluster/gangs.py).

Never restarted: a process Cohort asked to stop, one that exited 0, any other role
(a chief or ps exit restarts the gang from its checkpoint; the evaluator's end
never fails training), or anything while the agent shuts down.
"""

from __future__ import annotations

from services.wire.replica import ReplicaSpec, StartReplica
from workers.node.launcher import ReplicaKey

# A worker that dies at once would otherwise be started again in a tight loop.
RESPAWN_DELAY = 1.0


def _respawnable(spec: ReplicaSpec) -> bool:
    return spec.strategy == "parameter_server" and spec.role == "worker"


def may_respawn(
    spec: ReplicaSpec, exit_code: int, restarts: int, budget: int, *, stop_asked: bool
) -> bool:
    """Whether a replica whose process exited with `exit_code` is started again here."""
    return _respawnable(spec) and exit_code != 0 and not stop_asked and restarts < budget


def log_line(exit_code: int, restarts: int, budget: int) -> str:
    """What the replica's log says about the restart."""
    return (
        f"cohort agent: parameter_server worker exited with {exit_code}; started again "
        f"in place ({restarts} of {budget}); the chief retries its work meanwhile\n"
    )


class Respawns:
    """What an agent needs to start its replicas again: the message that started each,
    how often it was started again, which it was asked to stop. Its callers hold the
    agent's lock."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.messages: dict[ReplicaKey, StartReplica] = {}
        self.counts: dict[ReplicaKey, int] = {}
        self.stop_asked: set[ReplicaKey] = set()

    def started(self, key: ReplicaKey, message: StartReplica) -> None:
        if _respawnable(message.spec):  # only these are ever started again
            self.messages[key] = message

    def stopping(self, key: ReplicaKey) -> None:
        """Cohort asked to stop it: never started again after this."""
        if key in self.messages:
            self.stop_asked.add(key)

    def ended(self, key: ReplicaKey) -> None:
        """Its process is gone for good: forget it."""
        self.messages.pop(key, None)
        self.counts.pop(key, None)
        self.stop_asked.discard(key)

    def due(
        self, key: ReplicaKey, exit_code: int, *, stop_requested: bool
    ) -> tuple[StartReplica, int] | None:
        """The message to start it again with, and which restart that is; or None."""
        message = self.messages.get(key)
        restarts = self.counts.get(key, 0)
        if message is None or not may_respawn(
            message.spec,
            exit_code,
            restarts,
            self.budget,
            stop_asked=stop_requested or key in self.stop_asked,
        ):
            return None
        return message, restarts + 1

    def done(self, key: ReplicaKey, number: int) -> None:
        self.counts[key] = number
