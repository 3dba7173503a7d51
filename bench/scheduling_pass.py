"""A whole scheduling pass at scale: 10k queued jobs on 1k nodes, on PostgreSQL and Redis.

What is timed is `Scheduler.run_pass`, the function the scheduler's loop calls: read every
agent's signed heartbeat and the progress hash from Redis, then one fenced transaction
(register the heartbeats, reap, settle gangs, read the queue and the free capacity, place,
store the placed replicas and their jobs' transitions, the waiting jobs' reasons), commit,
and send the start messages through Celery to the nodes' queues in Redis. Each workload has
one `Scheduler` for the whole run, as a leader keeps its own through its term: the first
pass (a term's first, which writes the current attempts again) warms up and is not counted.

The cluster: N nodes of 8 CPU slots, one in four also with 8 GPUs, each running gangs of
1–2 replicas (their agents' heartbeats list them, as real agents' do, and their progress
beats are fresh, as running replicas' are). Every agent beats again before every pass, so
each pass reads 1,000 new heartbeats (the most a pass can see). The queue: M jobs
of 1–4 replicas, one in five with 1–2 GPUs per replica, priorities 0–2, over 4 projects
(fair sharing), one in ten `spread`.

Three workloads, interleaved pass by pass, each on its own database:

* **placing**: the nodes are about three quarters busy, then (`--place N`, 500 by default)
  their free slots and GPUs, the last nodes' first, are filled with running 1-replica
  gangs of a project with nothing queued until a pass places exactly N gangs (found by
  bisection, each try a placement rolled back; with 0, a pass places about 666); before
  each pass the previous pass's placements are undone in SQL (their replicas deleted,
  their jobs queued again) and the node queues emptied, so each pass really places the
  same work again;
* **full**: the nodes' every slot and GPU is busy, the queue is full: nothing fits, and
  nothing that placement reads changed since the pass before (a saturated cluster between
  submissions);
* **burst**: as full, but one more job is submitted before every pass, so placement's
  inputs changed and the whole queue is placed again (what most passes look like during
  a burst of submissions).

Each pass is split into read (Redis and SQL up to the placer's call), place (the pure
placer), write (after the placer, to the end of the commit) and dispatch (the start
messages to Redis). "cpu" is the scheduler process's CPU time in the pass, "pg cpu" that of
the PostgreSQL server processes serving the workload's database (read from /proc: the
server must run on this machine, else it shows 0).

`--steps` prints the CPU time of each step of the pass; `--profile` where the last pass
of each workload spent its time (pyinstrument, the dev extra's).

`--against DIR` runs the same passes on another checkout of Cohort (e.g. an older commit's
`git worktree`) in a second process, on databases and a Redis db of its own, pass for pass
in turn with this one (one process waits while the other runs): the two are compared
under the same load: the ratio of the two passes of each round, and the median of those
per-round ratios (never a ratio of the medians).

    .venv/bin/python bench/scheduling_pass.py [--jobs 10000] [--nodes 1000] [--passes 7]
        [--place 500]
        [--only placing|full|burst] [--steps] [--profile]
        [--pg postgresql+psycopg://postgres@127.0.0.1:5432/postgres]
        [--redis redis://127.0.0.1:6379/0] [--against /path/to/other/checkout
        [--against-python /path/to/its/.venv/bin/python]]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
# `--tree DIR`: import Cohort from another checkout (the process `--against` starts).
TREE = Path(sys.argv[sys.argv.index("--tree") + 1]) if "--tree" in sys.argv else ROOT
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(TREE))

from bench.pg import DEFAULT_SERVER, drop_database, new_database  # noqa: E402

SLOTS, GPUS = 8, 8
# Each workload and how busy its nodes are.
WORKLOADS = {"placing": 0.75, "full": 1.0, "burst": 1.0}
BENCH_KEY = "bench-signing-key-" + "x" * 32


class Workload:
    """One database and one Redis key space: a cluster, its running gangs and a queue."""

    def __init__(self, name: str, url: str, jobs: int, nodes: int, busy: float, seed: int) -> None:
        from services.models import Job, Node, Project, Replica
        from services.statuses import JobStatus, ReplicaStatus

        self.name, self.url = name, url
        rng = random.Random(seed)
        engine = sa.create_engine(url)
        now = dt.datetime.now(dt.UTC)
        self.node_ids = [f"{name}-node-{i:05d}" for i in range(nodes)]
        self.running: dict[str, list[tuple[int, int, int]]] = {n: [] for n in self.node_ids}
        # What `hold_to` may still fill: per node, CPU slots and GPUs held so far.
        self.held: dict[str, dict[str, int]] = {n: {"cpu": 0, "gpu": 0} for n in self.node_ids}
        # Every row with the same keys: one executemany for all.
        common = {
            "strategy": "multi_worker_mirrored",
            "trainer": "mlp_digits",
            "spec_hash": "0" * 64,
            "restart_policy": "never",
            "priority": 0,
            "placement": None,
            "started_at": None,
        }
        with engine.begin() as connection:
            connection.execute(
                sa.insert(Project), [{"id": p, "name": f"{name}-p{p}"} for p in range(1, 5)]
            )
            connection.execute(
                sa.insert(Node),
                [
                    {
                        "id": node_id,
                        "address": f"10.0.{i // 256}.{i % 256}",
                        "slots": SLOTS,
                        "gpus": GPUS if i % 4 == 0 else 0,
                        "gpu_ids": ",".join(map(str, range(GPUS))) if i % 4 == 0 else "",
                        "last_heartbeat": now,
                        "registered_at": now,
                    }
                    for i, node_id in enumerate(self.node_ids)
                ],
            )
            # Running gangs of 1-2 replicas on one node each, until `busy` of it is held.
            job_rows: list[dict[str, Any]] = []
            replica_rows: list[dict[str, Any]] = []
            job_id = 1
            started = now - dt.timedelta(seconds=30)
            for i, node_id in enumerate(self.node_ids):
                for kind, total in (("cpu", SLOTS), ("gpu", GPUS if i % 4 == 0 else 0)):
                    held = (
                        round(total * busy)
                        if busy >= 1
                        else min(total, int(total * busy + rng.random() * 2))
                    )
                    used = 0
                    while used < held:
                        count = min(rng.randint(1, 2), held - used)
                        job_rows.append(
                            {
                                **common,
                                "id": job_id,
                                "project_id": rng.randint(1, 4),
                                "name": f"running-{job_id}",
                                "replicas": count,
                                "gpus_per_replica": 1 if kind == "gpu" else 0,
                                "status": JobStatus.RUNNING,
                                "started_at": started,
                            }
                        )
                        for index in range(count):
                            replica_rows.append(
                                {
                                    "job_id": job_id,
                                    "attempt": 1,
                                    "index": index,
                                    "node_id": node_id,
                                    "address": f"{node_id}:{30000 + used}",
                                    "port": 30000 + used + (100 if kind == "gpu" else 0),
                                    "gpu_ids": str(used) if kind == "gpu" else "",
                                    "status": ReplicaStatus.RUNNING,
                                    "started_at": started,
                                    "progress_at": now,
                                    "dispatched_at": started,
                                }
                            )
                            self.running[node_id].append((job_id, 1, index))
                            used += 1
                        job_id += 1
                    self.held[node_id][kind] = used
            self.running_jobs = job_id - 1
            for _ in range(jobs):
                gpus = rng.choice((1, 2)) if rng.random() < 0.2 else 0
                job_rows.append(
                    {
                        **common,
                        "id": job_id,
                        "project_id": rng.randint(1, 4),
                        "name": f"queued-{job_id}",
                        "replicas": rng.randint(1, 4),
                        "gpus_per_replica": gpus,
                        "priority": rng.randint(0, 2),
                        "placement": "spread" if rng.random() < 0.1 else None,
                        "status": JobStatus.QUEUED,
                        "started_at": None,
                    }
                )
                job_id += 1
            for start in range(0, len(job_rows), 5000):
                connection.execute(sa.insert(Job), job_rows[start : start + 5000])
            connection.execute(sa.insert(Replica), replica_rows)
            connection.execute(
                sa.text("SELECT setval(pg_get_serial_sequence('jobs', 'id'), :top)"),
                {"top": job_id},
            )
            connection.execute(sa.text("ANALYZE"))
        engine.dispose()
        self.fillers = 0  # running 1-replica gangs added by hold_to

    def _free_units(self) -> list[tuple[str, str, int]]:
        """Every free CPU slot and GPU as (node, kind, unit), the last nodes' first: the
        order in which `hold_to` fills them."""
        units = []
        for i in reversed(range(len(self.node_ids))):
            node_id = self.node_ids[i]
            for kind, total in (("cpu", SLOTS), ("gpu", GPUS if i % 4 == 0 else 0)):
                units += [(node_id, kind, u) for u in range(self.held[node_id][kind], total)]
        return units

    def _filler_rows(self, units: list[tuple[str, str, int]], first_id: int) -> tuple[list, list]:
        """Running 1-replica gangs of project 5 (no job queued: fair sharing's turns among
        the queued projects stay as they were) holding `units`."""
        from services.statuses import JobStatus, ReplicaStatus

        now = dt.datetime.now(dt.UTC)
        started = now - dt.timedelta(seconds=30)
        jobs, replicas = [], []
        for offset, (node_id, kind, unit) in enumerate(units):
            job_id = first_id + offset
            jobs.append(
                {
                    "id": job_id, "project_id": 5, "name": f"filler-{job_id}",
                    "strategy": "multi_worker_mirrored", "trainer": "mlp_digits",
                    "spec_hash": "0" * 64, "restart_policy": "never", "priority": 0,
                    "placement": None, "replicas": 1, "status": JobStatus.RUNNING,
                    "gpus_per_replica": 1 if kind == "gpu" else 0, "started_at": started,
                }
            )  # fmt: skip
            replicas.append(
                {
                    "job_id": job_id, "attempt": 1, "index": 0, "node_id": node_id,
                    "address": f"{node_id}:{30000 + unit}",
                    "port": 30000 + unit + (100 if kind == "gpu" else 0),
                    "gpu_ids": str(unit) if kind == "gpu" else "",
                    "status": ReplicaStatus.RUNNING, "started_at": started,
                    "progress_at": now, "dispatched_at": started,
                }
            )  # fmt: skip
        return jobs, replicas

    def _placed_with(self, maker: Any, settings: Any, held: int) -> int:
        """How many gangs a pass places with the first `held` free units filled (tried
        in a transaction rolled back)."""
        from services.cluster import queue_placement
        from services.models import Job, Replica

        jobs, replicas = self._filler_rows(self._free_units()[:held], self.top_id + 1)
        session = maker()
        try:
            if jobs:
                session.execute(sa.insert(Job), jobs)
                session.execute(sa.insert(Replica), replicas)
            now = dt.datetime.now(dt.UTC)
            _, placed = queue_placement.place_queue(
                session=session, settings=settings, now=now, memo=None
            )
            return len(placed)
        finally:
            session.rollback()
            session.close()

    def hold_to(self, gangs: int, settings: Any) -> int:
        """Fill free capacity with running gangs until a pass places exactly `gangs`
        (the fewest filled units that bring it there); returns what it places then."""
        from services import db
        from services.models import Job, Project, Replica

        engine = db.make_engine(self.url)
        maker = db.sessionmaker(bind=engine)
        with engine.begin() as connection:
            self.top_id = connection.execute(sa.text("SELECT max(id) FROM jobs")).scalar_one()
            connection.execute(sa.insert(Project), [{"id": 5, "name": f"{self.name}-p5"}])
        low, high = 0, len(self._free_units())  # placed(low) > gangs >= placed(high)
        if self._placed_with(maker, settings, 0) <= gangs:
            high = 0
        while high - low > 1:
            middle = (low + high) // 2
            if self._placed_with(maker, settings, middle) > gangs:
                low = middle
            else:
                high = middle
        placed = self._placed_with(maker, settings, high)
        units = self._free_units()[:high]
        jobs, replicas = self._filler_rows(units, self.top_id + 1)
        with engine.begin() as connection:
            if jobs:
                connection.execute(sa.insert(Job), jobs)
                connection.execute(sa.insert(Replica), replicas)
            connection.execute(
                sa.text("SELECT setval(pg_get_serial_sequence('jobs', 'id'), :top)"),
                {"top": self.top_id + len(jobs) + 1},
            )
            connection.execute(sa.text("ANALYZE"))
        for job, replica in zip(jobs, replicas, strict=True):
            self.running[replica["node_id"]].append((job["id"], 1, 0))
        self.fillers = len(jobs)
        engine.dispose()
        return placed

    def heartbeats(self) -> dict[str, str]:
        """Every agent's heartbeat as it writes it into the nodes hash, sealed with its key."""
        from services.wire.events import NodeHeartbeat
        from services.wire.signing import HEARTBEAT, node_key, seal

        now = time.time()
        sealed = {}
        for i, node_id in enumerate(self.node_ids):
            gpus = tuple(range(GPUS)) if i % 4 == 0 else ()
            beat = NodeHeartbeat(
                node_id=node_id,
                address=f"10.0.{i // 256}.{i % 256}",
                slots=SLOTS,
                ts=now,
                gpus=len(gpus),
                replicas=tuple(self.running[node_id]),
                gpu_ids=gpus,
                gpu_models=tuple(("bench", 16384) for _ in gpus),
            )
            sealed[node_id] = seal(
                node_key(BENCH_KEY, node_id),
                purpose=HEARTBEAT,
                node_id=node_id,
                body=beat.encode(),
                now=now,
            )
        return sealed

    def submit(self, engine: sa.Engine) -> None:
        """One more job queued, as a submission during a burst: 1 CPU replica."""
        from services.models import Job
        from services.statuses import JobStatus

        with engine.begin() as connection:
            connection.execute(
                sa.insert(Job),
                [
                    {
                        "project_id": 1,
                        "name": "submitted",
                        "strategy": "multi_worker_mirrored",
                        "trainer": "mlp_digits",
                        "spec_hash": "0" * 64,
                        "restart_policy": "never",
                        "replicas": 1,
                        "gpus_per_replica": 0,
                        "priority": 0,
                        "status": JobStatus.QUEUED,
                    }
                ],
            )

    def undo_placements(self, engine: sa.Engine) -> int:
        """Put the queue back as it was before the last pass: its jobs queued again, the
        replicas it placed gone. Returns how many jobs the last pass had placed."""
        with engine.begin() as connection:
            placed = connection.execute(
                sa.text(
                    "UPDATE jobs SET status = 'queued', reason = '' WHERE status = 'scheduled' "
                    "AND id > :running RETURNING id"
                ),
                {"running": self.running_jobs},
            ).all()
            connection.execute(
                sa.text("DELETE FROM replicas WHERE status = 'pending' AND job_id > :running"),
                {"running": self.running_jobs},
            )
            connection.execute(
                sa.text("DELETE FROM job_events WHERE job_id > :running"),
                {"running": self.running_jobs},
            )
            # The running replicas beat progress every second, and a pass a second ago
            # stored it: this pass reads every beat and writes none (a row is rewritten
            # every 2 s at most; see docs/benchmarks.md).
            connection.execute(
                sa.text(
                    "UPDATE replicas SET progress_at = now() - interval '1 second' "
                    "WHERE status = 'running'"
                )
            )
        return len(placed)

    def progress(self) -> dict[str, str]:
        """Every running replica's progress beat, as its agent writes it: alive now."""
        from services.wire.batches import ProgressBeat

        now = time.time()
        return dict(
            ProgressBeat(job, attempt, index, now).encode()
            for keys in self.running.values()
            for job, attempt, index in keys
        )


class Stopwatch:
    """Marks taken inside one pass by wrappers around the placer and the dispatcher."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}

    def around(self, fn: Callable[..., Any], before: str, after: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.marks[before] = time.perf_counter()
            self.marks[f"{before} cpu"] = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.marks[after] = time.perf_counter()
                self.marks[f"{after} cpu"] = time.process_time()

        return timed


CLOCK_TICK = os.sysconf("SC_CLK_TCK")

# What `--steps` times inside a pass, as CPU of this process: (module, function, label);
# an indented label is part of the one above it. The dispatch is timed as "dispatch".
STEPS = (
    ("workers.control.scheduler", "read_heartbeats", "read heartbeats"),
    ("workers.control.scheduler", "read_progress", "read progress beats"),
    ("services.cluster.nodes", "record_heartbeats", "record heartbeats"),
    ("services.cluster.running_checks", "check_running", "check running replicas"),
    ("services.cluster.gangs", "jobs_to_settle", "jobs to settle"),
    ("services.cluster.placement_digest", "read_digest", "placement digest"),
    ("services.cluster.queue_placement", "_place_all", "queue, place, reasons"),
    ("services.cluster.queue_placement", "place", "  the placer"),
    ("services.cluster.queue_placement", "_schedule_gangs", "  store placed gangs"),
    ("services.cluster.queue_placement", "lock_jobs", "    lock the jobs"),
    ("services.cluster.queue_placement", "start_message", "    start messages"),
    ("services.cluster.queue_placement", "start_messages", "    start messages"),
    ("services.cluster.queue_placement", "transition_locked", "    move the jobs"),
    ("services.jobs.transitions", "stream_marks", "      stream marks"),
)


class StepClock:
    """CPU time spent in each of STEPS (those the checkout has) during one pass."""

    def __init__(self) -> None:
        import importlib

        self.spent: dict[str, float] = {}
        for module_name, name, label in STEPS:
            module = importlib.import_module(module_name)
            if hasattr(module, name):
                setattr(module, name, self._timed(getattr(module, name), label))

    def _timed(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[label] = self.spent.get(label, 0.0) + time.process_time() - start

        return timed


def server_cpu(engine: sa.Engine) -> dict[int, float]:
    """CPU seconds used so far by each PostgreSQL process serving `engine`'s database
    (but the one asking), from /proc; empty when the server is not on this machine."""
    with engine.connect() as connection:
        pids = (
            connection.execute(
                sa.text(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid()"
                )
            )
            .scalars()
            .all()
        )
    used = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        used[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICK  # utime + stime
    return used


class Leader:
    """One workload's scheduler, kept from pass to pass as a leader keeps it: its
    database's sessions, its term's fence, its Redis client and dispatcher."""

    def __init__(
        self, workload: Workload, settings: Any, client: Any, app: Any, keyring: Any
    ) -> None:
        from services import db
        from services.cluster.fencing import begin_term
        from workers.control import scheduler as scheduler_module
        from workers.control.dispatch import CeleryDispatcher

        self.workload = workload
        self.engine = db.make_engine(workload.url)
        self.maker = db.sessionmaker(bind=self.engine, expire_on_commit=False)
        self.admin = sa.create_engine(workload.url)  # the bench's own reads and resets
        self.statements = 0  # SQL statements the scheduler's engine sent (executemany: 1)
        sa.event.listen(self.engine, "before_cursor_execute", self._count)
        self.client = client
        self.use()
        self.fence = begin_term(lease=settings.SCHEDULER_LOCK_TTL)
        self.watch = Stopwatch()
        dispatcher = CeleryDispatcher(app, client, keyring)
        dispatcher.send = self.watch.around(  # type: ignore[method-assign]
            dispatcher.send, "send", "sent"
        )
        self.steps: StepClock | None = None  # set by Bench with --steps
        self.scheduler = scheduler_module.Scheduler(settings, client, dispatcher, keyring)

    def _count(self, *_args: Any) -> None:
        self.statements += 1

    def use(self) -> None:
        """Make this workload's database the one the pass's transactions open."""
        from services import db

        db.get_sessionmaker = lambda: self.maker  # type: ignore[assignment]

    def reset(self) -> int:
        """Undo the last pass's placements and beat again: every agent and running
        replica. Returns how many jobs the last pass placed."""
        from services.wire.keys import NODES_HASH, PROGRESS_HASH, node_queue

        beats, progress = self.workload.heartbeats(), self.workload.progress()
        self.client.delete(
            NODES_HASH, PROGRESS_HASH, *(node_queue(n) for n in self.workload.node_ids)
        )
        self.client.hset(NODES_HASH, mapping=beats)
        self.client.hset(PROGRESS_HASH, mapping=progress)
        if self.workload.name == "burst":
            self.workload.submit(self.admin)
        # Last, so the progress stored a second ago is still a second old when the pass
        # reads the beats (undo_placements).
        return self.workload.undo_placements(self.admin)

    def run(self, profile: bool) -> dict[str, float]:
        """One pass, timed; where it spent its time printed if `profile`."""
        from services.cluster import queue_placement

        self.use()
        original_place = queue_placement.place
        queue_placement.place = self.watch.around(original_place, "place", "placed")
        self.watch.marks.clear()
        if self.steps is not None:
            self.steps.spent.clear()
        server_before = server_cpu(self.admin)
        statements = self.statements
        profiler = None
        if profile:
            from pyinstrument import Profiler  # the dev extra's

            profiler = Profiler(interval=0.0005)
            profiler.start()
        try:
            begin = time.perf_counter()
            cpu = time.process_time()
            self.scheduler.run_pass(self.fence)
            end = time.perf_counter()
            cpu = time.process_time() - cpu
        finally:
            queue_placement.place = original_place
            if profiler is not None:
                profiler.stop()
        statements = self.statements - statements
        server_after = server_cpu(self.admin)
        if profiler is not None:
            print(f"--- {self.workload.name}: where the pass spent its time", file=sys.stderr)
            print(profiler.output_text(unicode=True, show_all=False), file=sys.stderr)
        m = self.watch.marks
        placed_at = m.get("placed", m.get("send", end))
        steps = (
            {f"step:{label}": spent for label, spent in self.steps.spent.items()}
            if self.steps is not None
            else {}
        )
        return {
            **steps,
            "total": end - begin,
            "cpu": cpu,
            "statements": statements,
            "pg_cpu": sum(used - server_before.get(pid, 0.0) for pid, used in server_after.items()),
            "read": m.get("place", placed_at) - begin,
            "place": placed_at - m.get("place", placed_at),
            "write": m["send"] - placed_at,
            "dispatch": m["sent"] - m["send"],
            "dispatch cpu": m["sent cpu"] - m["send cpu"],
        }

    def close(self) -> None:
        self.engine.dispose()
        self.admin.dispose()


class Bench:
    """Every workload's database and leader in one process, one round at a time."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        names = [args.only] if args.only else list(WORKLOADS)
        self.urls: dict[str, str] = {}
        self.leaders: dict[str, Leader] = {}
        self.placed: dict[str, list[int]] = {name: [] for name in names}
        try:
            self._set_up(names)
        except BaseException:
            self.close()
            raise

    def _set_up(self, names: list[str]) -> None:
        args = self.args
        for name in names:
            self.urls[name] = new_database(args.pg, f"sched_bench_{name}")
        # The scheduler reads its settings from the environment, as `cohort scheduler` does.
        os.environ.update(
            COHORT_REDIS_URL=args.redis,
            COHORT_SIGNING_KEY=BENCH_KEY,
            COHORT_DATABASE_URL=self.urls[names[0]],
        )
        from cli.stack import migrate
        from services.settings import get_settings
        from services.wire.client import get_redis
        from services.wire.signing import Keyring
        from workers.celery_app import make_celery

        get_settings.cache_clear()
        settings = get_settings()
        client = get_redis()
        keyring = Keyring(BENCH_KEY)
        app = make_celery(args.redis)
        steps = StepClock() if args.steps else None
        for name in names:
            busy = WORKLOADS[name]
            migrate(self.urls[name])
            start = time.perf_counter()
            workload = Workload(name, self.urls[name], args.jobs, args.nodes, busy, seed=7)
            if name == "placing" and args.place:
                placed = workload.hold_to(args.place, settings)
                log(f"{name}: {workload.fillers} one-replica gangs added: a pass places {placed}")
                if placed != args.place:  # one more filled unit took more than one gang
                    log(f"{name}: no filling places exactly {args.place}; the nearest below")
            self.leaders[name] = Leader(workload, settings, client, app, keyring)
            self.leaders[name].steps = steps
            log(
                f"{Path(sys.modules['services'].__file__ or '').parent.parent}: {name}: "
                f"{workload.running_jobs} running gangs, {args.jobs} "
                f"queued, made in {time.perf_counter() - start:.0f} s"
            )

    def round(self, counted: bool, profile: bool) -> dict[str, dict[str, float]]:
        """One pass of each workload; the jobs each placed are kept if `counted`."""
        samples = {}
        for name, leader in self.leaders.items():
            leader.reset()
            samples[name] = leader.run(profile)
            placed = leader.workload.undo_placements(leader.admin)
            if counted:
                self.placed[name].append(placed)
        return samples

    def close(self) -> None:
        from services.wire.client import get_redis
        from services.wire.keys import NODES_HASH, PROGRESS_HASH, node_queue

        for leader in self.leaders.values():
            get_redis().delete(
                NODES_HASH, PROGRESS_HASH, *(node_queue(n) for n in leader.workload.node_ids)
            )
            leader.close()
        for url in self.urls.values():
            drop_database(self.args.pg, url)


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def serve(args: argparse.Namespace) -> None:
    """The `--against` side: a round per line read, its samples written back as JSON."""
    answers, sys.stdout = sys.stdout, sys.stderr  # stdout carries the answers alone
    bench = Bench(args)
    try:
        print(json.dumps({"ready": True}), file=answers, flush=True)
        for line in sys.stdin:
            command = json.loads(line)
            if command.get("quit"):
                break
            samples = bench.round(command["counted"], command["profile"])
            print(
                json.dumps({"samples": samples, "placed": bench.placed}), file=answers, flush=True
            )
    finally:
        bench.close()


class Against:
    """Another checkout's passes, in a process of its own driven round by round."""

    def __init__(self, args: argparse.Namespace) -> None:
        tree = Path(args.against).resolve()
        redis_url = args.redis.rsplit("/", 1)
        # A Redis db of its own: the two processes' node queues and hashes never meet.
        other_redis = f"{redis_url[0]}/{int(redis_url[1] or 0) + 1}"
        command = [
            args.against_python or sys.executable,
            str(Path(__file__).resolve()),
            "--serve",
            "--tree",
            str(tree),
            "--jobs",
            str(args.jobs),
            "--nodes",
            str(args.nodes),
            "--pg",
            args.pg,
            "--redis",
            other_redis,
            "--place",
            str(args.place),
        ]
        if args.only:
            command += ["--only", args.only]
        self.name = tree.name
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.placed: dict[str, list[int]] = {}

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the --against process ended (exit {self.process.wait()})")
        return json.loads(line)

    def wait_ready(self) -> None:
        self._answer()

    def round(self, counted: bool, profile: bool) -> dict[str, dict[str, float]]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"counted": counted, "profile": profile}) + "\n")
        self.process.stdin.flush()
        answer = self._answer()
        self.placed = answer["placed"]
        return answer["samples"]

    def close(self) -> None:
        if self.process.poll() is None and self.process.stdin is not None:
            self.process.stdin.write(json.dumps({"quit": True}) + "\n")
            self.process.stdin.flush()
        self.process.wait()


COLUMNS = ("total", "cpu", "pg_cpu", "read", "place", "write", "dispatch")


def report(
    label: str, samples: dict[str, list[dict[str, float]]], placed: dict[str, list[int]]
) -> None:
    print(f"{label}: median of {len(next(iter(samples.values())))} passes, ms")
    print(
        f"{'workload':>9} {'placed':>7} {'median':>9} {'slowest':>9} {'cpu':>8} "
        f"{'pg cpu':>8} {'read':>8} {'place':>7} {'write':>8} {'dispatch':>8} {'SQL':>5}"
    )
    for name, rows in samples.items():

        def median(key: str, rows: list[dict[str, float]] = rows) -> float:
            return statistics.median(r[key] for r in rows) * 1e3

        slowest = max(r["total"] for r in rows) * 1e3
        print(
            f"{name:>9} {statistics.median(placed[name]):>7.0f} {median('total'):>9.1f} "
            f"{slowest:>9.1f} {median('cpu'):>8.1f} {median('pg_cpu'):>8.1f} "
            f"{median('read'):>8.1f} {median('place'):>7.1f} {median('write'):>8.1f} "
            f"{median('dispatch'):>8.1f} {median('statements') / 1e3:>5.0f}",
            flush=True,
        )


def report_steps(samples: dict[str, list[dict[str, float]]]) -> None:
    """The median CPU time of each step, per workload (ms)."""
    names = list(samples)
    print("CPU by step (this side), median ms: " + ", ".join(names))
    labels = list(dict.fromkeys(label for _, _, label in STEPS))  # a label may time two names
    tops = [f"step:{label}" for label in labels if not label.startswith(" ")]
    for row in samples.values():
        for r in row:
            r["step:the rest"] = r["cpu"] - r["dispatch cpu"] - sum(r.get(k, 0.0) for k in tops)
            r["step:dispatch"] = r["dispatch cpu"]
            r["step:the whole pass"] = r["cpu"]
    for label in [*labels, "dispatch", "the rest", "the whole pass"]:
        key = f"step:{label}"
        cells = [
            f"{statistics.median(r.get(key, 0.0) for r in samples[name]) * 1e3:8.1f}"
            for name in names
        ]
        print(f"  {label:<26}" + "".join(cells))


def report_ratios(samples: dict[str, dict[str, list[dict[str, float]]]]) -> None:
    """This side's pass over the other's, round by round (the two passes of a round ran
    one right after the other), and the median of those per-round ratios."""
    print("this / against, per round (wall), and the median of per-round ratios:")
    for name, mine in samples["this"].items():
        theirs = samples["other"][name]
        cells = []
        for key in ("total", "cpu", "pg_cpu"):
            ratios = [a[key] / b[key] for a, b in zip(mine, theirs, strict=True) if b[key]]
            cells.append(f"{key} {statistics.median(ratios):.3f}" if ratios else f"{key} -")
            if key == "total":
                rounds = " ".join(f"{r:.3f}" for r in ratios)
        print(f"{name:>9}: " + ", ".join(cells) + f"  (total per round: {rounds})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--passes", type=int, default=7)
    parser.add_argument(
        "--place",
        type=int,
        default=500,
        help="gangs each placing pass places: free capacity is filled with running "
        "1-replica gangs until a pass places exactly this many (0: as built, about 666)",
    )
    parser.add_argument(
        "--pg", default=DEFAULT_SERVER, help="PostgreSQL admin URL: databases are made and dropped"
    )
    parser.add_argument(
        "--only", choices=list(WORKLOADS), default=None, help="time one of the two workloads only"
    )
    parser.add_argument(
        "--steps",
        action="store_true",
        help="print the CPU time of each step of the pass (this side)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="print where the last pass of each workload spent its time",
    )
    parser.add_argument(
        "--redis", default=os.environ.get("COHORT_TEST_REDIS", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument(
        "--against",
        default=None,
        metavar="DIR",
        help="another checkout of Cohort whose passes run in turn with these",
    )
    parser.add_argument(
        "--against-python",
        default=None,
        metavar="PYTHON",
        help="the interpreter of the --against side (its checkout's own "
        "environment, with its own dependencies); default: this one",
    )
    parser.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args)
        return

    other = Against(args) if args.against else None
    try:
        bench = Bench(args)
        try:
            if other is not None:
                other.wait_ready()
            sides: dict[str, Any] = {"this": bench}
            if other is not None:
                sides = {"other": other, "this": bench}
            samples: dict[str, dict[str, list[dict[str, float]]]] = {
                side: {name: [] for name in bench.leaders} for side in sides
            }
            for round_ in range(args.passes + 1):  # the first round is a term's first pass
                order = list(sides) if round_ % 2 else list(reversed(sides))
                for side in order:
                    got = sides[side].round(
                        counted=round_ > 0, profile=args.profile and round_ == args.passes
                    )
                    if round_:
                        for name, sample in got.items():
                            samples[side][name].append(sample)
                log(f"round {round_} done")
        finally:
            bench.close()
    finally:
        if other is not None:
            other.close()

    print(
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC {platform.node()} Python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores; {args.jobs} queued jobs x {args.nodes} nodes, "
        f"{args.passes} passes each"
    )
    report(f"this ({ROOT.name})", samples["this"], bench.placed)
    if args.steps:
        report_steps(samples["this"])
    if other is not None:
        report(f"against ({other.name})", samples["other"], other.placed)
        report_ratios(samples)


if __name__ == "__main__":
    main()
