"""A replica's process from its end to its reported exit: respawned in place, or shipped,
reaped and reported (the agent's supervision thread, one per replica).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import redis

from services.wire.client import publish_node_event
from services.wire.events import ReplicaRestarted
from workers.node import isolation, respawn
from workers.node.exits import exit_code_of
from workers.node.launcher import ReplicaProcess, spawn, tail
from workers.node.logship import LogShipper

if TYPE_CHECKING:
    from workers.node.agent import Agent

log = logging.getLogger("cohort.agent")


def watch(agent: Agent, process: ReplicaProcess, shipper: LogShipper | None = None) -> None:
    """Wait for the replica's process to end (starting it again in place while
    workers/node/respawn.py says so), ship its last lines, points and files, reap what
    its job left under its uid, then report its exit."""
    returncode = process.popen.wait()
    while (again := respawn_in_place(agent, process, exit_code_of(returncode))) is not None:
        process = again
        returncode = process.popen.wait()
    with agent.lock:
        agent.respawns.ended(process.key)
    if shipper is not None:
        shipper.finish()  # the last lines go out before the exit is reported
        agent.ended.keep(shipper.send_again)
    # So do the last points, checkpoint, model, TensorBoard files and the log.
    sidecar = agent.sidecars.finish(process.key, process.log_path)
    if sidecar is not None:
        agent.ended.keep(sidecar.reporter.send_again, sidecar.reporter.close)
    user = agent.replica_user(process.key.job_id)
    code = exit_code_of(returncode)
    with agent.lock:
        agent.processes.pop(process.key, None)
        agent.preparer.release(agent.interpreters.pop(process.key, None))
        agent.exits.note(process.key, code)  # a beat from now on lists it as exited
        # By uid, not job: two jobs a multiple of REPLICA_UID_RANGE apart share one.
        last_here = user is not None and not any(
            agent.replica_user(k.job_id) == user for k in (*agent.processes, *agent.preparing)
        )
    if last_here:
        # Nothing of the job runs here any more: whatever its code left running
        # under its uid (a daemon outside the process group) goes too.
        isolation.reap(user, agent.node_id, agent.data_dir)
    agent.exits.exited(process.key, code, tail(process.log_path))


def respawn_in_place(agent: Agent, process: ReplicaProcess, code: int) -> ReplicaProcess | None:
    """Start an exited replica again in place if workers/node/respawn.py says so."""
    key = process.key
    with agent.lock:
        due = agent.respawns.due(key, code, stop_requested=process.stop_requested.is_set())
    if due is None or agent.stopping.wait(respawn.RESPAWN_DELAY):
        return None
    message, number = due
    with agent.lock:  # the process stays listed meanwhile: the heartbeat still has it
        if agent.respawns.due(key, code, stop_requested=False) is None or agent.stopping.is_set():
            return None  # asked to stop while it waited
        try:
            with open(process.log_path, "a", encoding="utf-8") as log_file:
                log_file.write(respawn.log_line(code, number, agent.respawns.budget))
            again = spawn(
                message,
                agent.data_dir,
                agent.python_of(key),
                agent.replica_user(key.job_id),
                agent.pool,
                agent.settings,
            )
        except Exception:  # noqa: BLE001 - then its exit is reported as it was
            log.exception("could not start %s again", key)
            return None
        agent.processes[key] = again
        agent.respawns.done(key, number)
    log.warning(
        "%s exited with %d: started again as pid %d (%d of %d)",
        key,
        code,
        again.popen.pid,
        number,
        agent.respawns.budget,
    )
    try:
        publish_node_event(
            agent.redis,
            ReplicaRestarted(
                agent.node_id,
                key.job_id,
                key.attempt,
                key.index,
                again.popen.pid,
                code,
                number,
                time.time(),
            ),
            agent.node_key,
        )
    except redis.RedisError as exc:  # the replica runs on; only the count is late
        log.warning("could not report the restart of %s: %s", key, exc)
    return again
