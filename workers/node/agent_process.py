"""The agent's process: its one `Agent`, and the Celery worker that feeds it its queue.

It consumes only its own Celery queue (`node.<id>`), with a thread pool so that tasks
run in this process, next to the replica processes they start.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import IO, TYPE_CHECKING, Any

from services.settings import Settings, get_settings
from services.wire import acl
from services.wire.client import get_redis
from services.wire.keys import node_queue
from workers.node import containers, data_dir_lock, isolation, leftovers, ports
from workers.node.agent import Agent
from workers.node.loop_wake import wake_on_signals
from workers.node.self_drain import SelfDrain

if TYPE_CHECKING:
    from celery import Celery

log = logging.getLogger("cohort.agent")

_agent: Agent | None = None
_data_dir_lock: IO[str] | None = None  # this process's hold on DATA_DIR (run_agent)


def current_agent() -> Agent:
    """The agent of this process (set by run_agent before the worker consumes)."""
    if _agent is None:
        raise RuntimeError("no agent in this process: start it with `cohort agent`")
    return _agent


def declare_queue(app: Celery, name: str) -> None:
    """Declare Celery queue `name` (its exchange binding) on the broker, as the worker
    does when it connects: a wipe of Redis erases the binding, which a worker whose
    connection never broke does not write again."""
    with app.connection_for_write() as connection:
        app.amqp.queues[name].bind(connection.default_channel).declare()


def run_agent(settings: Settings | None = None) -> None:
    """Run this machine's agent until it is told to stop (SIGTERM / Ctrl-C)."""
    global _agent
    settings = settings or get_settings()
    from workers.celery_app import app

    _claim_node(settings)
    agent = Agent(settings, get_redis(), lambda: declare_queue(app, node_queue(settings.node_id)))
    _agent = agent
    # The heartbeat thread beats at once, and through a Redis that is away: a first beat
    # made here, unguarded, ended an agent started while Redis restarted (the chaos soak).
    agent.start_heartbeats()
    agent.start_pool()
    threading.Thread(target=agent.find_gpus, daemon=True, name="find-gpus").start()
    log.info(
        "agent %s at %s with %d slots, queue %s",
        agent.node_id,
        settings.NODE_ADDRESS,
        settings.NODE_SLOTS,
        node_queue(agent.node_id),
    )
    overlap = ports.check_range(settings.PORT_RANGE_START, settings.PORT_RANGE_END)
    if overlap:
        log.warning("%s", overlap)
    worker = _node_worker(app, agent.node_id)
    try:
        worker.start()
    finally:
        agent.shutdown()


def _claim_node(settings: Settings) -> None:
    """What must hold before an agent of this node consumes anything."""
    # First of all: a second agent of this node on this DATA_DIR would end the first one's
    # replicas as a predecessor's leftovers (below). Held until the process ends.
    global _data_dir_lock
    _data_dir_lock = data_dir_lock.hold(settings.data_dir, settings.node_id)
    # Before consuming: a node whose replicas could not run as their own users (a uid
    # its user namespace does not map, an interpreter they cannot reach) says so now.
    isolation.check_node(settings, settings.REPLICA_PYTHON or sys.executable)
    # Before the first beat, which says what runs here: nothing of a previous agent of this
    # node still does (a frozen replica would outlive its guard's SIGTERM for seconds while
    # the scheduler, told the node runs nothing, places its gang again). Its containers
    # first, found by their labels (workers/node/containers.py): ending its `docker run`
    # clients first would stop some of them through the client's signal proxy, racing
    # the removal, so that what was removed, and said, would depend on timing.
    containers.remove_leftovers(settings.CONTAINER_ENGINE, settings.node_id, settings.data_dir)
    leftovers.end_predecessors(settings.node_id, settings.data_dir)


def _node_worker(app: Celery, node_id: str) -> Any:
    """The Celery worker consuming this node's queue alone, on threads of this process."""
    from celery import signals

    # This node's own unacknowledged-message keys, not the ones every consumer shares, and
    # no remote control (a fanout every agent would read): what the agent's Redis user
    # may touch is its own (services/wire/acl.py).
    app.conf.broker_transport_options = {
        **app.conf.broker_transport_options,
        **acl.unacked_keys(node_id),
    }
    app.conf.worker_enable_remote_control = False
    worker = app.Worker(
        hostname=f"agent@{node_id}",
        queues=[node_queue(node_id)],
        pool="threads",
        concurrency=4,
        loglevel="WARNING",
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
    )

    def tick(sender: Any, **_: Any) -> None:  # sender: the worker's consumer
        if getattr(sender, "hub", None) is not None:  # an event loop (Redis has one)
            wake_on_signals(sender.hub)  # a SIGTERM stops it at once (loop_wake.py)
        # After Celery's own handlers are in place (its start installs them): SIGTERM
        # drains the node first (workers/node/self_drain.py), then is passed on to them.
        agent = current_agent()
        SelfDrain(agent, agent.settings.DRAIN_GRACE).install()

    signals.worker_ready.connect(tick, weak=False)
    return worker
