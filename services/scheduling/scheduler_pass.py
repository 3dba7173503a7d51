"""One scheduling pass: register heartbeats, reap lost nodes, settle gangs, place the queue.

The pass only reads and writes SQL and returns the messages to send; the caller
commits first and sends after (a message must never announce uncommitted state).
Its order is the point of this module: each step acts on what the ones before it settled.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.cluster import (
    drains,
    gangs,
    nodes,
    quarantine,
    queue_placement,
    running_checks,
    stragglers,
    watchdog,
)
from services.cluster.pass_lock import lock_pass
from services.cluster.placement_digest import PlacementMemo
from services.models import utcnow
from services.retraining import firing, promotion
from services.settings import Settings
from services.statuses import LIVE_NODE_STATUSES
from services.sweeps.advance import advance_sweeps
from services.wire.replica import Message


@dataclass
class PassResult:
    messages: list[Message] = field(default_factory=list)
    placed: list[int] = field(default_factory=list)
    lost_nodes: list[str] = field(default_factory=list)
    # The beating nodes' beat columns as this pass leaves them: the next pass's `known`
    # once this one has committed (nodes.record_heartbeats).
    node_rows: nodes.NodeRows = field(default_factory=dict)


def run_pass(
    *,
    session: Session,
    settings: Settings,
    heartbeats: list[nodes.Heartbeat],
    progress: dict[tuple[int, int, int], float] | None = None,
    output: dict[tuple[int, int, int], float] | None = None,
    now: dt.datetime | None = None,
    memo: PlacementMemo | None = None,
    known_nodes: nodes.NodeRows | None = None,
    busy: stragglers.BusyWindow | None = None,
) -> PassResult:
    """One full pass; the caller commits, then sends `result.messages`.

    Args:
        heartbeats: the last heartbeat of every agent.
        progress: the last progress heartbeat (unix time) of each running replica,
            keyed by (job, attempt, index).
        output: when each running replica's output last grew (unix time, this
            scheduler's clock), keyed alike: progress too once its gang has formed.
        memo: the leader's memory of its last idle pass (placement_digest.py); the
            caller calls `memo.committed()` once this pass's transaction has committed.
        known_nodes: the `node_rows` of the leader's last committed pass (None: none,
            or the nodes' rows were written outside passes since, as `excuse_silence`).
        busy: the leader's window of the stragglers' figures (stragglers.BusyWindow;
            None: every figure stored is read).
    """
    if memo is not None:
        memo.begin()
    lock_pass(session=session)  # before reading anything the pass decides on
    if session.get_bind().dialect.name == "postgresql":
        # Its queries are many and short, over tables of every job and replica: the
        # planner's cost estimate calls for JIT compilation, whose set-up (~150 ms a
        # query on the 10k-job benchmark) is longer than the queries themselves.
        session.execute(sa.text("SET LOCAL jit = off"))
    now = now or utcnow()
    result = PassResult()
    result.node_rows = nodes.record_heartbeats(session=session, beats=heartbeats, known=known_nodes)
    held = _watch(session, settings, heartbeats, (progress or {}, output or {}), now, result)
    # Cron schedules fire before settling, so a `replace` cancel is acted on in this pass.
    firing.fire_due_schedules(session=session, settings=settings, now=now)
    promotion.decide_pending(session=session, now=now, settings=settings)
    result.messages.extend(_settle(session, held, now))
    _judge_nodes(session, settings, now, busy)
    # After settling (a trial that just ended frees its sweep's turn), before placing
    # (a trial created now is placed in this pass).
    advance_sweeps(session=session, settings=settings, now=now)
    result.messages.extend(
        queue_placement.resend_stale_starts(session=session, settings=settings, now=now)
    )
    result.messages.extend(watchdog.clean_up_finished(session=session, now=now))
    placed_messages, result.placed = queue_placement.place_queue(
        session=session, settings=settings, now=now, memo=memo
    )
    result.messages.extend(placed_messages)
    return result


def _settle(
    session: Session, held: frozenset[tuple[int, int, int]], now: dt.datetime
) -> list[Message]:
    """Every gang with something to settle settled; the stop messages to send."""
    to_settle = gangs.jobs_to_settle(session=session, held=held)
    replicas = gangs.replicas_of(session=session, job_ids=[job.id for job in to_settle])
    messages: list[Message] = []
    for job in to_settle:
        messages.extend(
            gangs.settle_job(
                session=session, job=job, now=now, held=held, replicas=replicas.get(job.id, [])
            )
        )
    return messages


def _judge_nodes(
    session: Session, settings: Settings, now: dt.datetime, window: stragglers.BusyWindow | None
) -> None:
    """Stragglers named and nodes quarantined: after settling (the failures it recorded
    count), before placing (a node quarantined now is offered nothing in this pass)."""
    stragglers.name_stragglers(session=session, settings=settings, now=now, window=window)
    quarantine.quarantine_nodes(session=session, settings=settings, now=now)


def _watch(
    session: Session,
    settings: Settings,
    heartbeats: list[nodes.Heartbeat],
    beats: tuple[dict[tuple[int, int, int], float], dict[tuple[int, int, int], float]],
    now: dt.datetime,
    result: PassResult,
) -> frozenset[tuple[int, int, int]]:
    """The watchdog's findings recorded (lost nodes into `result`), and the drains' step
    (its messages into `result`); the replicas settled that their agents still run, which
    settling must not place again. `beats`: the
    replicas' progress and output times (run_pass's `progress` and `output`)."""
    result.lost_nodes = watchdog.reap_lost_nodes(session=session, settings=settings, now=now)
    nodes.mark_rows_lost(result.node_rows, result.lost_nodes)
    checked = running_checks.check_running(
        session=session,
        settings=settings,
        heartbeats=heartbeats,
        progress=beats[0],
        output=beats[1],
        now=now,
    )
    ready = {
        node_id for node_id, row in result.node_rows.items() if row["status"] in LIVE_NODE_STATUSES
    }
    held = watchdog.declared_but_running(
        session=session, heartbeats=heartbeats, running=checked.running, ready=ready
    )
    watchdog.settle_unanswered_starts(
        session=session, settings=settings, heartbeats=heartbeats, ready=ready, now=now
    )
    watchdog.enforce_deadlines(session=session, now=now)
    # After the watchdog (a lost node's gangs are broken, not drained), before settling (a
    # gang moved off a drained node is settled as restarting in this pass).
    result.messages.extend(drains.advance_drains(session=session, settings=settings, now=now))
    return held
