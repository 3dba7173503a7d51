"""Job submissions per second under 50 concurrent clients, against a bare insert route.

One PostgreSQL database of its own and the given Redis. Two servers, side by side in one
run, each under the same load, interleaved (Cohort, bare, Cohort, bare...):

(C) a real `cohort api` (`python -m cli api`, as `cohort up` runs it) with a real
    `cohort scheduler` beside it, since every submission wakes the scheduler and its
    passes share the cores;
(B) the ceiling, bench/bare_insert_app.py: a sync FastAPI route inserting one row with
    SQLAlchemy into the same `jobs` table, no auth, no quota, under the same uvicorn
    settings.

The load client is a process of its own (asyncio, raw HTTP/1.1 keep-alive connections,
so that the client spends as little of the shared cores as it can): CLIENTS connections
each POST a valid job with a bearer token, one after another, for DURATION seconds, while
one more connection lists `GET /api/v1/jobs` one request after another. Reported per
server: submissions/s (2xx), p50/p99 of submit and of list, and the CPU seconds each
process used during the burst (psutil). Afterwards the jobs stored are counted: they must
equal the 2xx answers (nothing lost, nothing half-stored).

`--before DIR` adds a third side: Cohort from another checkout (e.g. `git archive HEAD |
tar -x -C DIR` before a change), on a database of its own that its checkout migrated
(`cohort migrate`), so that a change of the schema is compared too. The sides' order
rotates each round, and each round's ratios between the sides are printed with the median
of those per-round ratios (never a ratio of medians). `--profile DIR`: py-spy's stacks of
each process during the bursts.

    .venv/bin/python bench/api_throughput.py --redis redis://127.0.0.1:6379/14
        [--clients 50] [--duration 20] [--rounds 1] [--before DIR] [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import redis
import sqlalchemy as sa
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import pg  # noqa: E402
from bench import processes as bench_processes  # noqa: E402

TOKEN = "bench-throughput-token-0123456789abcdef"  # the bootstrap (admin) token
# A submitting user's token, not an admin's (admins also get the cluster-wide place in the
# queue), in a project of its own ("bench"); the bare app's rows go to another ("bare").
USER_TOKEN = "bench-submitter-token-0123456789abcdef"
JOB = {"strategy": "one_device", "replicas": 1}


# -- the load client (run as a process of its own: `--load URL`) ---------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection; requests one after another."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self.auth = f"Authorization: Bearer {token}\r\n" if token else ""
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{self.auth}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("closed")
        status = int(status_line.split()[1])
        length = 0
        chunked = False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        if chunked:
            data = b""
            while True:
                size = int((await self.reader.readline()).strip(), 16)
                if size == 0:
                    await self.reader.readline()
                    break
                data += await self.reader.readexactly(size)
                await self.reader.readline()
            return status, data
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _load(url: str, token: str, clients: int, duration: float, prefix: str) -> dict[str, Any]:
    host, port = url.removeprefix("http://").split(":")
    statuses: dict[str, int] = {}
    submit_ms: list[float] = []
    list_ms: list[float] = []
    ids: list[int] = []
    errors: list[str] = []
    end = time.monotonic() + duration

    async def submitter(index: int) -> None:
        conn = Connection(host, int(port), token)
        n = 0
        try:
            while time.monotonic() < end:
                n += 1
                body = json.dumps({**JOB, "name": f"{prefix}-{index}-{n}"}).encode()
                start = time.perf_counter()
                status, data = await conn.request("POST", "/api/v1/jobs", body)
                submit_ms.append((time.perf_counter() - start) * 1000)
                statuses[str(status)] = statuses.get(str(status), 0) + 1
                if 200 <= status < 300:
                    ids.append(json.loads(data)["id"])
                elif len(errors) < 5:
                    errors.append(data[:300].decode("utf-8", "replace"))
        finally:
            conn.close()

    async def lister() -> None:
        conn = Connection(host, int(port), token)
        try:
            while time.monotonic() < end:
                start = time.perf_counter()
                status, data = await conn.request("GET", "/api/v1/jobs?limit=50")
                list_ms.append((time.perf_counter() - start) * 1000)
                if status != 200 and len(errors) < 5:
                    errors.append(f"list {status}: {data[:300]!r}")
        finally:
            conn.close()

    started = time.monotonic()
    await asyncio.gather(lister(), *(submitter(i) for i in range(clients)))
    elapsed = time.monotonic() - started
    return {
        "elapsed": elapsed,
        "statuses": statuses,
        "submit_ms": submit_ms,
        "list_ms": list_ms,
        "ids": ids,
        "errors": errors,
    }


def run_load(url: str, token: str, clients: int, duration: float, prefix: str) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    result = asyncio.run(_load(url, token, clients, duration, prefix))
    used = os.times()
    result["client_cpu"] = used.user + used.system
    json.dump(result, sys.stdout)


# -- the servers -----------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    url: str
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def stop(self) -> None:
        bench_processes.stop(*self.processes.values(), grace=15)


def start_cohort(env: dict[str, str], log_dir: Path, tree: Path = ROOT) -> Server:
    """`cohort api` and `cohort scheduler` of the checkout at `tree`."""
    port = bench_processes.free_port()
    url = f"http://127.0.0.1:{port}"
    server = Server("cohort", url)
    for part, argv in (
        ("api", ["api", "--port", str(port)]),
        ("scheduler", ["scheduler"]),
    ):
        server.processes[part] = bench_processes.start_cli(
            argv, env, cwd=tree, log=log_dir / f"{part}.log"
        )
    bench_processes.wait_healthy(url, server.processes)
    return server


def start_bare(env: dict[str, str], project_id: int, log_dir: Path) -> Server:
    """The bare app under the uvicorn settings `cohort api` uses (cli/main.py)."""
    port = bench_processes.free_port()
    url = f"http://127.0.0.1:{port}"
    server = Server("bare", url)
    workers = env.get("COHORT_API_WORKERS", "1")
    log = open(log_dir / "bare.log", "ab")  # noqa: SIM115 - the child owns it
    server.processes["api"] = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "bench.bare_insert_app:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
            "--workers",
            workers,
        ],
        cwd=ROOT,
        env={**env, "BARE_PROJECT_ID": str(project_id)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    bench_processes.wait_healthy(url, server.processes)
    return server


def tree(process: subprocess.Popen[bytes]) -> list[psutil.Process]:
    root = psutil.Process(process.pid)
    return [root, *root.children(recursive=True)]


def cpu_times(processes: list[psutil.Process]) -> dict[int, float]:
    """CPU seconds so far of each process still alive, by pid."""
    found = {}
    for process in processes:
        try:
            times = process.cpu_times()
            found[process.pid] = times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return found


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between the two readings by the processes alive at both (a
    PostgreSQL backend that ended during the burst is left out; ones that started in it
    are counted from the first reading, i.e. not at all)."""
    return sum(after[pid] - before[pid] for pid in before.keys() & after.keys())


def postgres_processes() -> list[psutil.Process]:
    return [
        p for p in psutil.process_iter(["name"]) if p.info["name"] in ("postgres", "postgresql")
    ]


def burst(
    server: Server,
    token: str,
    clients: int,
    duration: float,
    prefix: str,
    profile: Path | None = None,
) -> dict[str, Any]:
    """One burst against `server`; its figures and the CPU each process used.
    `profile`: where py-spy writes each process's collapsed stacks during the burst."""
    spies = [
        bench_processes.py_spy(process.pid, profile / f"{prefix}-{name}.txt", duration)
        for name, process in server.processes.items()
        if profile
    ]
    watched = {name: tree(process) for name, process in server.processes.items()}
    watched["postgres"] = postgres_processes()
    before = {name: cpu_times(procs) for name, procs in watched.items()}
    client = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--load",
            server.url,
            "--token",
            token,
            "--clients",
            str(clients),
            "--duration",
            str(duration),
            "--prefix",
            prefix,
        ],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    out, _ = client.communicate(timeout=duration + 300)
    for spy in spies:
        spy.wait(60)
    assert client.returncode == 0, "the load client failed"
    result: dict[str, Any] = json.loads(out)
    result["cpu"] = {
        name: cpu_used(before[name], cpu_times(procs)) for name, procs in watched.items()
    }
    result["cpu"]["load client"] = result["client_cpu"]
    return result


def quantile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100)[q - 1]


def stored(engine: sa.Engine, project_id: int, prefix: str) -> int:
    with engine.connect() as connection:
        return int(
            connection.execute(
                sa.text("SELECT count(*) FROM jobs WHERE project_id = :p AND name LIKE :n"),
                {"p": project_id, "n": f"{prefix}-%"},
            ).scalar_one()
        )


def half_stored(engine: sa.Engine, project_id: int) -> int:
    """Cohort's jobs without their `submitted` event (a job is stored with it, or not)."""
    with engine.connect() as connection:
        return int(
            connection.execute(
                sa.text(
                    "SELECT count(*) FROM jobs j WHERE j.project_id = :p AND NOT EXISTS "
                    "(SELECT 1 FROM job_events e WHERE e.job_id = j.id)"
                ),
                {"p": project_id},
            ).scalar_one()
        )


def migrated_by(tree: Path, env: dict[str, str], prefix: str) -> str:
    """A new database `<prefix>_<random>` migrated by the checkout at `tree` (`cohort
    migrate`): its URL."""
    url = pg.new_database(pg.DEFAULT_SERVER, prefix)
    subprocess.run(
        [sys.executable, "-m", "cli", "migrate"],
        cwd=tree,
        env={**env, "COHORT_DATABASE_URL": url},
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return url


def project_of(url: str, name: str, token: str | None = None) -> int:
    """Project `name`'s id in the database at `url`, made if missing, with `token` on it."""
    from services.auth import tokens

    engine = sa.create_engine(url)
    with Session(engine) as session, session.begin():
        if token is None:
            project_id = tokens.ensure_project(session=session, name=name).id
        else:
            user = tokens.ensure_token(
                session=session, token=token, scopes=["read", "submit"], project_name=name
            )
            project_id = user.project_id
    engine.dispose()
    return project_id


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--db", default="api_bench_throughput", help="the prefix of the sides' databases"
    )
    parser.add_argument("--load")
    parser.add_argument("--token", default="")
    parser.add_argument("--prefix", default="j")
    parser.add_argument("--profile", type=Path, help="a directory for py-spy's stacks")
    parser.add_argument(
        "--before",
        type=Path,
        help="another checkout (e.g. an earlier commit) run as a third "
        "server, 'before', beside this one",
    )
    args = parser.parse_args()
    if args.load:
        run_load(args.load, args.token, args.clients, args.duration, args.prefix)
        return

    bus = redis.Redis.from_url(args.redis, decode_responses=True)
    bus.flushdb()
    data = Path(f"/tmp/{args.db}")
    data.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "COHORT_REDIS_URL": args.redis,
        "COHORT_BOOTSTRAP_TOKEN": TOKEN,
        "COHORT_DATA_DIR": str(data),
        "COHORT_SIGNING_KEY": secrets.token_hex(32),
        # The burst queues tens of thousands of jobs: the quota is still checked (the
        # project's row lock and the count), with room for them all.
        "COHORT_QUOTA_MAX_QUEUED_JOBS": "10000000",
    }
    # Each Cohort side on a database its own checkout migrated (a change of the schema,
    # an index say, is part of what is compared); the bare route's rows go to this one's.
    db_url = migrated_by(ROOT, env, args.db)
    databases = {"cohort": db_url, "bare": db_url}
    if args.before:
        databases["before"] = migrated_by(args.before, env, f"{args.db}_before")
    # The Cohort sides' rows go to the submitter's project, the bare route's to its own.
    projects = {
        name: project_of(url, "bench", USER_TOKEN)
        for name, url in databases.items()
        if name != "bare"
    }
    projects["bare"] = project_of(db_url, "bare")
    engines = {name: sa.create_engine(url) for name, url in databases.items()}
    kinds = ["cohort", *(["before"] if args.before else []), "bare"]
    results: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    servers: list[Server] = []
    try:
        for round_index in range(args.rounds):
            # Rotated each round, so that no side always runs first (on the emptiest
            # queue) or last (right after another's burst).
            for name in kinds[round_index % len(kinds) :] + kinds[: round_index % len(kinds)]:
                side_env = {**env, "COHORT_DATABASE_URL": databases[name]}
                server = (
                    start_bare(side_env, projects["bare"], data)
                    if name == "bare"
                    else start_cohort(side_env, data, args.before if name == "before" else ROOT)
                )
                servers.append(server)
                prefix = f"{name}{round_index}"
                # A short warm-up (connections, imports), not counted.
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--load",
                        server.url,
                        "--token",
                        USER_TOKEN,
                        "--clients",
                        "4",
                        "--duration",
                        "1",
                        "--prefix",
                        f"warm{prefix}",
                    ],
                    stdout=subprocess.DEVNULL,
                    check=True,
                    cwd=ROOT,
                )
                result = burst(
                    server,
                    USER_TOKEN,
                    args.clients,
                    args.duration,
                    prefix,
                    args.profile,
                )
                server.stop()
                result["stored"] = stored(engines[name], projects[name], prefix)
                results[name].append(result)
                ok = sum(n for s, n in result["statuses"].items() if s.startswith("2"))
                print(
                    f"round {round_index + 1} {name}: {ok / result['elapsed']:.0f}/s "
                    f"{result['statuses']} stored {result['stored']}",
                    flush=True,
                )
        half = {
            name: half_stored(engines[name], projects[name]) for name in results if name != "bare"
        }
        report(results, args, half)
    finally:
        for server in servers:
            server.stop()
        for engine in engines.values():
            engine.dispose()
        for url in set(databases.values()):
            pg.drop_database(pg.DEFAULT_SERVER, url)


def per_round(results: dict[str, list[dict[str, Any]]]) -> None:
    """Each round's submissions/s and submit p99 per side, the ratios of each round's
    sides, and the median of those per-round ratios (never a ratio of medians)."""
    kinds = list(results)
    pairs = [(a, b) for i, a in enumerate(kinds) for b in kinds[i + 1 :]]

    def rate(result: dict[str, Any]) -> float:
        ok = sum(n for s, n in result["statuses"].items() if s.startswith("2"))
        return ok / result["elapsed"]

    print("\n| round | " + " | ".join(f"{k} /s (p99)" for k in kinds), end=" | ")
    print(" | ".join(f"{a} / {b}" for a, b in pairs) + " |")
    print("|---" * (1 + len(kinds) + len(pairs)) + "|")
    ratios: dict[tuple[str, str], list[float]] = {pair: [] for pair in pairs}
    for index in range(len(results[kinds[0]])):
        rates = {k: rate(results[k][index]) for k in kinds}
        cells = [
            f"{rates[k]:.0f} ({quantile(results[k][index]['submit_ms'], 99):.0f} ms)" for k in kinds
        ]
        for a, b in pairs:
            ratios[(a, b)].append(rates[a] / rates[b] if rates[b] else float("nan"))
        line = " | ".join(cells + [f"{ratios[p][-1]:.2f}" for p in pairs])
        print(f"| {index + 1} | {line} |")
    medians = " | ".join(f"**{statistics.median(ratios[p]):.2f}**" for p in pairs)
    print(f"| median of the per-round ratios | {' | '.join('' for _ in kinds)} | {medians} |")


def report(
    results: dict[str, list[dict[str, Any]]], args: argparse.Namespace, half: dict[str, int]
) -> None:
    kinds = list(results)
    titles = {"cohort": "Cohort", "before": "Cohort before", "bare": "bare insert"}

    def merged(name: str, key: str) -> list[float]:
        return [v for r in results[name] for v in r[key]]

    def ok(name: str) -> int:
        return sum(n for r in results[name] for s, n in r["statuses"].items() if s.startswith("2"))

    def row(label: str, values: dict[str, float], unit: str = "", digits: int = 1) -> str:
        cells = " | ".join(f"{values[k]:.{digits}f}{unit}" for k in kinds)
        ratios = " | ".join(
            f"{values[k] / values['bare']:.2f}" if values["bare"] else "–"
            for k in kinds
            if k != "bare"
        )
        return f"| {label} | {cells} | {ratios} |"

    print(
        f"\n{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
        f"{args.clients} clients × {args.duration:.0f} s × {args.rounds} round(s); "
        f"COHORT_API_WORKERS={os.environ.get('COHORT_API_WORKERS', '1')}"
    )
    others = [k for k in kinds if k != "bare"]
    print(
        "| | "
        + " | ".join(titles[k] for k in kinds)
        + " | "
        + " | ".join(f"{titles[k]} / bare" for k in others)
        + " |"
    )
    print("|---" * (1 + len(kinds) + len(others)) + "|")
    print(
        row(
            "submissions/s",
            {k: ok(k) / sum(r["elapsed"] for r in results[k]) for k in kinds},
            digits=0,
        )
    )
    for key, label in (("submit_ms", "submit"), ("list_ms", "GET /api/v1/jobs")):
        for q in (50, 99):
            print(
                row(
                    f"{label} p{q}",
                    {k: quantile(merged(k, key), q) for k in kinds},
                    " ms",
                )
            )
    names = sorted({n for k in kinds for r in results[k] for n in r["cpu"]})
    for process in names:
        print(
            row(
                f"CPU s, {process}",
                {k: sum(r["cpu"].get(process, 0.0) for r in results[k]) for k in kinds},
            )
        )
    print(
        row(
            "api CPU ms per submission",
            {k: 1000 * sum(r["cpu"]["api"] for r in results[k]) / max(ok(k), 1) for k in kinds},
        )
    )
    per_round(results)
    for name in kinds:
        kept = sum(r["stored"] for r in results[name])
        ids = merged(name, "ids")
        print(
            f"{name}: {ok(name)} answered 2xx, {kept} stored, {len(set(ids))} distinct "
            f"ids; statuses {[r['statuses'] for r in results[name]]}; "
            f"errors {[r['errors'][:2] for r in results[name]]}"
        )
        assert ok(name) == kept == len(set(ids)), f"{name}: 2xx answers and stored jobs differ"
    for name, count in half.items():
        print(f"{name}: jobs stored without their `submitted` event: {count}")
    assert not any(half.values())


if __name__ == "__main__":
    main()
