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

from services.wire.replica import ReplicaSpec

# A worker that dies at once would otherwise be started again in a tight loop.
RESPAWN_DELAY = 1.0


def may_respawn(spec: ReplicaSpec, exit_code: int, restarts: int, budget: int, *,
                stop_asked: bool) -> bool:
    """Whether a replica whose process exited with `exit_code` is started again here."""
    return (spec.strategy == "parameter_server" and spec.role == "worker"
            and exit_code != 0 and not stop_asked and restarts < budget)


def log_line(exit_code: int, restarts: int, budget: int) -> str:
    """What the replica's log says about the restart."""
    return (f"cohort agent: parameter_server worker exited with {exit_code}; started again "
            f"in place ({restarts} of {budget}); the chief retries its work meanwhile\n")
