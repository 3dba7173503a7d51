"""The chaos soak: many small jobs on three agents while faults are injected at random,
then the invariants checked from SQL and the processes (tests/chaos/invariants.py).

    make chaos                              # 200 jobs, a new seed (printed)
    make chaos JOBS=50 CHAOS_SEED=1234      # repeat a run's choices
    python -m tests.chaos.soak --jobs 20 --seed 7
    pytest tests/chaos                      # the CI size (tests/chaos/test_soak.py)

The stack is the real one on a PostgreSQL server of the soak's own (tests/pgserver.py,
which it restarts) and an embedded Redis (which it kills and starts again, empty), with
the fault tests' short timeouts (tests/faults/conftest.py FAST): the api, the scheduler
and three agents of two slots each, every agent with a DATA_DIR of its own and one
artifact store for all (checkpoints follow a gang to another node).

The jobs are the built-in `mlp_digits` (the cheapest trainer that checkpoints) for a few
dozen steps, or, for the share of them `tensorflow_share` leaves, steppers (a user's
command that reports a step every few hundredths of a second: tests/e2e/stepper.py): 1-3
replicas, pack or spread, restart policy never, on_failure or exit_code with 1-3
restarts; a share of them is cancelled, some while queued, some once running. The large
soak runs TensorFlow alone; the CI size mostly steppers, whose processes the faults treat
alike (killed, frozen, orphaned, restarted) at a tenth of a TensorFlow replica's CPU.
Every choice — the jobs, which to cancel and when, the faults, their victims and how long
each lasts — comes from one generator seeded by CHAOS_SEED (printed at the start):
the same seed makes the same choices, though the timing of a real stack differs.
Faults: tests/chaos/faults.py. The first faults are one of each kind, so even a short
soak injects every kind: the replica faults first (they need a live replica, which only a
running job has), then the others in a random order, which are injected even if every job
has ended by then. Then kinds at random, one every few seconds, until every job has ended
(or, with `max_faults`, until that many were injected).

Each run appends its summary to test-artifacts/reliability.jsonl ("kind": "soak"):
`bench/reliability_report.py --write` puts it in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy.orm import Session

from cli.stack import Stack
from services.models import Job, Replica
from services.statuses import TERMINAL_STATUSES
from tests.chaos import invariants
from tests.chaos.faults import FAULT_KINDS, REPLICA_KINDS, Injector
from tests.chaos.processes import ProcessWatch
from tests.chaos.summary import SoakResult
from tests.e2e.conftest import PORT_BASE, free_port
from tests.e2e.stepper import stepping_job
from tests.faults.conftest import FAST, FAULT_TOKEN
from tests.pgserver import PostgresServer, postgres_server
from workers.node.ports import listening_ports

AGENTS = ("node-a", "node-b", "node-c")
SETTLE_S = 90.0  # after the last job ended: for processes to go, points to land, agents


@dataclass
class SoakConfig:
    jobs: int = 200
    seed: int = field(default_factory=lambda: random.SystemRandom().randrange(10**6))
    agents: int = 3
    slots: int = 2  # per agent
    fault_gap: tuple[float, float] = (3.0, 10.0)  # seconds between two faults
    # None: faults until every job has ended. A bound (CI) keeps the soak's length from
    # feeding on itself: faults slow the jobs, and slow jobs draw more faults.
    max_faults: int | None = None
    cancel_share: float = 0.15
    tensorflow_share: float = 1.0  # of the jobs; the others are steppers
    pool: int = 0  # warm replica processes per agent (COHORT_REPLICA_POOL_SIZE)
    time_limit: float = 4 * 3600.0  # for every job to end, from the first submission
    verbose: bool = True


def job_specs(
    rng: random.Random, count: int, tensorflow_share: float = 1.0
) -> list[dict[str, Any]]:
    """`count` small jobs, 1-3 replicas, mixed policies: a few dozen steps of mlp_digits
    (`tensorflow_share` of them) or a stepper's 3-9 seconds of steps."""
    specs = []
    for i in range(count):
        policy = rng.choice(("never", "on_failure", "on_failure", "exit_code"))
        common = {
            "name": f"chaos-{i:03d}",
            "replicas": rng.choice((1, 1, 2, 2, 3)),
            "placement": rng.choice(("pack", "spread")),
            "restart_policy": policy,
            "max_restarts": 0 if policy == "never" else rng.randint(1, 3),
        }
        if rng.random() < tensorflow_share:
            specs.append(
                {
                    **common,
                    "trainer": "mlp_digits",
                    "hyperparameters": {
                        "epochs": rng.randint(2, 3),
                        "steps_per_epoch": rng.randint(10, 25),
                        "hidden_units": 16,
                        "seed": i,
                    },
                }
            )
        else:
            specs.append(stepping_job(rng.randint(100, 300), 0.03, **common))
    return specs


@dataclass
class Cancel:
    """A cancel the soak will ask for: at `at` (monotonic) or once the job runs."""

    job_index: int
    when_running: bool
    delay: float
    at: float | None = None
    asked: bool = False


class Soak:
    """One run: the stack, the jobs, the faults, the checks."""

    def __init__(
        self, config: SoakConfig, workdir: Path, log: Callable[[str], None] | None = None
    ) -> None:
        self.config = config
        self.workdir = workdir
        self.rng = random.Random(config.seed)
        self.agents = (
            list(AGENTS[: config.agents])
            if config.agents <= len(AGENTS)
            else [f"node-{i}" for i in range(config.agents)]
        )
        self.data_dirs = {node: workdir / f"data-{node}" for node in self.agents}
        self.start = time.monotonic()
        self.log = log or (lambda line: None)
        self.result = SoakResult(config.jobs, config.agents, config.seed, config.pool)
        self.held_before: set[int] = set()  # ports of the range listened on before the start

    def say(self, line: str) -> None:
        self.log(f"[{time.monotonic() - self.start:7.1f}s] {line}")

    # -- the stack -------------------------------------------------------------
    @contextlib.contextmanager
    def stack(self) -> Iterator[tuple[Stack, PostgresServer]]:
        with postgres_server(free_port()) as postgres:
            url = postgres.create_database("cohort")
            stack = Stack(
                {
                    **FAST,
                    "COHORT_DATABASE_URL": url,
                    "COHORT_REDIS_URL": "",
                    "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
                    "COHORT_DATA_DIR": str(self.workdir / "control"),
                    "COHORT_ARTIFACT_URL": str(self.workdir / "artifacts"),
                    "COHORT_API_PORT": str(free_port()),
                    "COHORT_PORT_RANGE_START": PORT_BASE,
                    # A warm process is known once SQL names its pid (processes.py).
                    "COHORT_REPLICA_POOL_SIZE": str(self.config.pool),
                    "COHORT_BOOTSTRAP_TOKEN": FAULT_TOKEN,
                    # The soak's faults fall on nodes at random, no node worse than another:
                    # quarantine (a policy about bad nodes, tests/faults/test_stragglers.py)
                    # would only take capacity away as they pile up.
                    "COHORT_QUARANTINE_FAILURES": "0",
                },
                quiet=True,
            )
            settings = stack.settings
            self.held_before = listening_ports(settings.PORT_RANGE_START, settings.PORT_RANGE_END)
            try:
                stack.start(("api", "scheduler"))
                for node in self.agents:
                    stack.add_agent(node, self.config.slots, data_dir=str(self.data_dirs[node]))
                yield stack, postgres
            finally:
                stack.stop()

    def _engine(self, postgres: PostgresServer) -> sa.Engine:
        return sa.create_engine(
            postgres.url("cohort"), pool_pre_ping=True, connect_args={"connect_timeout": 3}
        )

    # -- the run ---------------------------------------------------------------
    def run(self) -> SoakResult:
        config = self.config
        self.say(
            f"chaos soak: seed {config.seed} (CHAOS_SEED={config.seed} repeats its "
            f"choices), {config.jobs} jobs on {config.agents} agents"
        )
        with self.stack() as (stack, postgres):
            engine = self._engine(postgres)
            watch = ProcessWatch(self.workdir, handed=_handed(engine) if config.pool else None)
            watch.start()
            try:
                self._soak(stack, postgres, engine, watch)
            finally:
                watch.stop()
                engine.dispose()
        # After the stack stopped: nothing of its replicas may be left, warm ones included.
        self.result.violations += invariants.check_leftovers(
            watch.sample(), "after the stack stopped", watch.warm_live()
        )
        self.result.seconds = time.monotonic() - self.start
        return self.result

    def _soak(
        self, stack: Stack, postgres: PostgresServer, engine: sa.Engine, watch: ProcessWatch
    ) -> None:
        config = self.config
        http = httpx.Client(
            base_url=stack.url, timeout=10.0, headers={"Authorization": f"Bearer {stack.token}"}
        )
        self._wait(
            lambda: self._ready_nodes(engine) == len(self.agents), 120, "every agent to register"
        )
        specs = job_specs(self.rng, config.jobs, config.tensorflow_share)
        chosen = self.rng.sample(range(config.jobs), round(config.jobs * config.cancel_share))
        cancels = [
            Cancel(i, self.rng.random() < 0.5, self.rng.uniform(0, 60)) for i in sorted(chosen)
        ]
        job_ids = [self._submit(http, spec, i) for i, spec in enumerate(specs)]
        trained = sum("trainer" in spec for spec in specs)
        self.say(
            f"submitted {len(job_ids)} jobs ({trained} TensorFlow, "
            f"{len(job_ids) - trained} steppers); {len(cancels)} will be cancelled"
        )
        injector = Injector(stack, postgres, watch, self.rng, self.agents, self.say)
        # The replica faults first, while jobs run; the stack's own parts can go down
        # at any time, so the round is finished even after the last job ended (a quick
        # machine ended a 12-job soak in 37 s, before its sixth fault).
        first_round = [kind for kind in FAULT_KINDS if kind in REPLICA_KINDS]
        rest = [kind for kind in FAULT_KINDS if kind not in REPLICA_KINDS]
        self.rng.shuffle(first_round)
        self.rng.shuffle(rest)
        first_round += rest
        next_fault = time.monotonic() + self.rng.uniform(*config.fault_gap)
        statuses: dict[int, str] = {}
        all_ended = False
        last_read = 0.0
        deadline = self.start + config.time_limit
        while time.monotonic() < deadline:
            injector.restore_due()
            injector.revive_exited()
            if time.monotonic() - last_read >= 1.0:
                statuses = self._statuses(engine, job_ids) or statuses
                last_read = time.monotonic()
                all_ended = len(statuses) == len(job_ids) and all(
                    s in TERMINAL_STATUSES for s in statuses.values()
                )
                if all_ended and all(kind in REPLICA_KINDS for kind in first_round):
                    break
            self._cancel(http, cancels, job_ids, statuses)
            if time.monotonic() >= next_fault and (
                config.max_faults is None or injector.counts.total() < config.max_faults
            ):
                kind = first_round.pop(0) if first_round else self.rng.choice(FAULT_KINDS)
                if not injector.inject(kind) and kind not in injector.counts:
                    # Nothing to take it yet: it stays first, unless no job is left to
                    # give it a replica.
                    first_round.insert(len(first_round) if all_ended else 0, kind)
                next_fault = time.monotonic() + self.rng.uniform(*config.fault_gap)
            time.sleep(0.2)
        else:
            self.say("time limit: not every job ended")
        ended = dt.datetime.now(dt.UTC)
        self.say(f"faults: {dict(injector.counts)}; putting everything right")
        injector.restore_all()
        self.result.faults = injector.counts
        self.result.exited = injector.exited
        self.result.cancels_asked = sum(c.asked for c in cancels)
        self._settle_and_check(
            engine, watch, job_ids, {job_ids[c.job_index] for c in cancels if c.asked}, ended, stack
        )

    def _submit(self, http: httpx.Client, spec: dict[str, Any], index: int) -> int:
        key = {"Idempotency-Key": f"chaos-{self.config.seed}-{index}"}
        deadline = time.monotonic() + 120
        while True:
            try:
                response = http.post("/api/v1/jobs", json=spec, headers=key)
                if response.status_code in (200, 201):
                    return int(response.json()["id"])
                if response.status_code < 500:
                    raise AssertionError(f"job {index} refused: {response.text}")
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"job {index} could not be submitted")
            time.sleep(0.2)

    def _cancel(
        self,
        http: httpx.Client,
        cancels: list[Cancel],
        job_ids: list[int],
        statuses: dict[int, str],
    ) -> None:
        now = time.monotonic()
        for cancel in cancels:
            if cancel.asked:
                continue
            status = statuses.get(job_ids[cancel.job_index])
            if status in TERMINAL_STATUSES:
                continue
            if cancel.at is None and (not cancel.when_running or status == "running"):
                cancel.at = now + (self.rng.uniform(0, 5) if cancel.when_running else cancel.delay)
            if cancel.at is None or now < cancel.at:
                continue
            try:
                response = http.post(f"/api/v1/jobs/{job_ids[cancel.job_index]}/cancel")
            except httpx.HTTPError:
                continue  # the api is down: asked again next tick
            if response.status_code == 200:
                cancel.asked = True
                self.say(f"cancelled job {job_ids[cancel.job_index]} ({status})")
            elif response.status_code < 500:
                cancel.at = float("inf")  # too late: it ended meanwhile (409)

    def _statuses(self, engine: sa.Engine, job_ids: list[int]) -> dict[int, str] | None:
        try:
            with engine.connect() as connection:
                return {
                    job_id: str(status)
                    for job_id, status in connection.execute(
                        sa.select(Job.id, Job.status).where(Job.id.in_(job_ids))
                    )
                }
        except sa.exc.OperationalError:
            return None  # PostgreSQL is down

    def _ready_nodes(self, engine: sa.Engine, since: dt.datetime | None = None) -> int:
        """How many agents are ready (with a heartbeat after `since`, if given)."""
        since = since or dt.datetime.min.replace(tzinfo=dt.UTC)
        with Session(engine) as session:
            return sum(
                1 for node in self.agents if not invariants.check_nodes(session, [node], since)
            )

    def _wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return True
            except sa.exc.OperationalError:
                pass
            time.sleep(0.5)
        self.say(f"gave up waiting for {what} after {timeout:.0f}s")
        return False

    def _settle_and_check(
        self,
        engine: sa.Engine,
        watch: ProcessWatch,
        job_ids: list[int],
        cancel_asked: set[int],
        ended: dt.datetime,
        stack: Stack,
    ) -> None:
        """Wait (bounded) for the stack to settle after the faults, then check it all."""
        restored = dt.datetime.now(dt.UTC)
        result = self.result
        self._wait(lambda: not watch.live(), SETTLE_S, "every replica process to end")
        # A heartbeat after the processes ended: the ports each agent reports are current.
        quiet = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)
        self._wait(
            lambda: self._ready_nodes(engine, quiet) == len(self.agents),
            SETTLE_S,
            "every agent to beat after the faults",
        )

        def metrics_settled() -> bool:
            with Session(engine) as session:
                return not invariants.check_metrics(session, job_ids, self.data_dirs)

        self._wait(metrics_settled, SETTLE_S, "the metrics of succeeded attempts")

        with Session(engine) as session:
            result.violations += invariants.check_jobs(session, job_ids, cancel_asked)
            result.violations += invariants.check_overlaps(watch.overlaps.values(), watch.interval)
            result.violations += invariants.check_metrics(session, job_ids, self.data_dirs)
            result.violations += invariants.check_leftovers(watch.live(), "after the soak")
            result.violations += invariants.check_capacity(
                session,
                (stack.settings.PORT_RANGE_START, stack.settings.PORT_RANGE_END),
                self.held_before,
            )
            result.violations += invariants.check_nodes(session, self.agents, restored)
            jobs = session.execute(sa.select(Job).where(Job.id.in_(job_ids))).scalars().all()
            result.outcomes.update(str(job.status) for job in jobs)
            for job in sorted(jobs, key=lambda j: j.id):
                self.say(
                    f"job {job.id}: {job.status} in attempt {job.attempt} "
                    f"({job.replicas} replicas, {job.restart_policy} "
                    f"{job.max_restarts}): {job.reason[:160]}"
                )
            result.restarted = sum(1 for job in jobs if job.attempt > 1)
        self.say(
            f"checked {len(job_ids)} jobs, {len(watch.seen)} replica processes seen "
            f"in {watch.samples} samples; ended {ended:%H:%M:%S}"
        )


def _handed(engine: sa.Engine) -> Callable[[], dict[int, tuple[int, int, int, str]]]:
    """The pid -> replica map a pooled soak's process watch reads (processes.py)."""

    def read() -> dict[int, tuple[int, int, int, str]]:
        query = sa.select(
            Replica.pid, Replica.job_id, Replica.attempt, Replica.index, Replica.node_id
        ).where(Replica.pid.is_not(None))
        try:
            with engine.connect() as connection:
                rows = connection.execute(query.order_by(Replica.id)).all()
        except sa.exc.OperationalError:  # PostgreSQL restarted by the soak: next time
            return {}
        return {pid: (job, attempt, index, node) for pid, job, attempt, index, node in rows}

    return read


def run_soak(
    config: SoakConfig, workdir: Path | None = None, log: Callable[[str], None] | None = None
) -> SoakResult:
    """Run one soak in `workdir` (a new temporary directory, removed after, if None);
    its summary is appended to test-artifacts/reliability.jsonl."""
    own = workdir is None
    # Replicas run as their jobs' uids: every directory above their DATA_DIR must let
    # them pass (0711), as tests/conftest.py's replicas_tmp_root does.
    directory = Path(tempfile.mkdtemp(prefix="cohort-chaos-")) if own else Path(workdir)
    directory.chmod(0o711)
    try:
        result = Soak(config, directory, log).run()
    finally:
        if own:
            shutil.rmtree(directory, ignore_errors=True)
    result.save()
    return result


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS") or 200))
    parser.add_argument(
        "--seed",
        type=int,
        default=(int(os.environ["CHAOS_SEED"]) if os.environ.get("CHAOS_SEED") else None),
    )
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--slots", type=int, default=2, help="per agent")
    parser.add_argument(
        "--pool", type=int, default=0, help="warm replica processes per agent (0: none)"
    )
    parser.add_argument(
        "--tensorflow-share",
        type=float,
        default=1.0,
        metavar="SHARE",
        help="of the jobs, 0-1 (the others are steppers)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        metavar="DIR",
        help="run in DIR (new or empty) and keep it: the stack's logs, every node's DATA_DIR",
    )
    args = parser.parse_args(argv)
    from tests.pgserver import binary, server_user

    if binary("initdb") is None or server_user() is None:
        sys.stderr.write(
            "the soak needs PostgreSQL's server programs (initdb, pg_ctl) and, "
            "as root, a `postgres` account and runuser\n"
        )
        return 2
    config = SoakConfig(
        jobs=args.jobs,
        agents=args.agents,
        slots=args.slots,
        tensorflow_share=args.tensorflow_share,
        pool=args.pool,
    )
    if args.seed is not None:
        config.seed = args.seed
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    result = run_soak(config, args.keep, log=say)
    say("\n" + result.table())
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
