"""A replica against the embedded Redis of the default stack (`cohort up`): it knows the
port (COHORT_EMBEDDED_REDIS_PORT, fixed and documented) and speaks RESP over a raw socket,
as any program can. Every command is answered with an authentication error, nothing it
sent is written: a forged log line for another project's job never shows through REST, no
key is set, Redis keeps its data and keeps running. The password is in a 0600 file of
DATA_DIR, on no process's command line, in no replica's environment, in no service log."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from cli.stack import Stack
from cohort.client import Client
from services.wire.batches import LogBatch
from services.wire.keys import LOGS_STREAM, NODES_HASH
from tests.e2e.conftest import embedded_stack, wait_for, wait_terminal
from tests.security.test_replica_reach import code_dir, job_spec, project_token, submit_as
from workers import layout

__all__ = ["embedded_stack"]  # the default stack, as `cohort up` runs it

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="isolation needs an agent as root"),
]

FORGED = "FORGED-LINE-from-another-project"
PLANTED = "cohort:planted-by-a-replica"

# Sends each command of commands.json (a list of argument lists) to 127.0.0.1:PORT in
# RESP, one connection each, and records the first line of each answer; writes them to
# its work dir with its own environment, then says it is done.
ATTACKER = """import json, os, socket, sys
port = int(sys.argv[1])

def resp(args):
    out = b"*%d\\r\\n" % len(args)
    for arg in args:
        data = arg.encode()
        out += b"$%d\\r\\n%s\\r\\n" % (len(data), data)
    return out

answers = []
for args in json.load(open("commands.json")):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(resp(args))
            answer = conn.recv(4096).split(b"\\r\\n")[0].decode(errors="replace")
    except OSError as exc:
        answer = "socket: " + type(exc).__name__
    answers.append([args[0], answer])
report = os.path.join(os.environ["COHORT_WORK_DIR"], "redis.json")
with open(report + ".part", "w") as handle:
    json.dump({"answers": answers, "env": dict(os.environ)}, handle)
os.replace(report + ".part", report)
print("REDIS-DONE", flush=True)
"""


def attacks(victim_job: int) -> list[list[str]]:
    """What the issue's replica ran: a probe, a listing, a forged log line of another
    project's job (in the agents' own format), a key of its own, then the destructive."""
    forged = LogBatch(victim_job, 1, 0, [(999_999, time.time(), FORGED)]).encode().decode()
    return [
        ["PING"],
        ["KEYS", "*"],
        ["XRANGE", LOGS_STREAM, "-", "+"],
        ["XADD", LOGS_STREAM, "*", "data", forged],
        ["SET", PLANTED, "1"],
        ["CONFIG", "GET", "requirepass"],
        ["FLUSHALL"],
        ["SHUTDOWN", "NOSAVE"],
    ]


def run_attack(
    stack: Stack, tmp_path: Path, token: str, victim_job: int
) -> tuple[int, dict[str, Any]]:
    """Project `token`'s job runs the attacks; its id and its report (read from its work
    dir as soon as it is written: a Redis it shut down would keep the job from ending)."""
    code = code_dir(
        tmp_path,
        "attack",
        {"attack.py": ATTACKER, "commands.json": json.dumps(attacks(victim_job))},
    )
    port = str(stack.settings.EMBEDDED_REDIS_PORT)
    job = submit_as(
        stack, token, tmp_path, job_spec("a-dials-redis", ["python", "attack.py", port]), code
    )
    report = layout.work_dir(stack.settings.data_dir, job, 1, 0) / "redis.json"
    wait_for(report.is_file, 120, "the attacker's report")
    return job, json.loads(report.read_text())


def test_a_replica_gets_nothing_from_the_embedded_redis(
    embedded_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, _admin = embedded_stack
    token_a, token_b = project_token(stack, "alpha"), project_token(stack, "bravo")
    client_b = Client(stack.url, token_b)
    victim = submit_as(
        stack,
        token_b,
        tmp_path,
        job_spec("b-logs", ["python", "say.py"]),
        code_dir(tmp_path, "b", {"say.py": "print('B says hello', flush=True)\n"}),
    )
    assert wait_terminal(client_b, victim)["status"] == "succeeded"
    wait_for(lambda: client_b.logs(victim), 30, "B's log line in the database")

    attacker, report = run_attack(stack, tmp_path, token_a, victim)
    answers = report["answers"]
    assert [command for command, _ in answers] == [a[0] for a in attacks(victim)]
    # Every command refused for want of a password: none ran.
    assert all(answer.startswith("-NOAUTH") for _, answer in answers), json.dumps(answers)
    client_a = Client(stack.url, token_a)
    assert wait_terminal(client_a, attacker)["status"] == "succeeded"
    # Its own output went through the logs stream after its forged entry would have:
    # once that is in SQL, the ingest has been past the forgery.
    wait_for(
        lambda: any("REDIS-DONE" in line["line"] for line in client_a.logs(attacker)),
        30,
        "the attacker's log line in the database",
    )

    # Nothing it sent was written, and Redis kept its data and kept running.
    assert stack.child("redis").poll() is None
    password = stack.settings.redis_password_file.read_text().strip()
    bus = redis.Redis.from_url(stack.settings.redis_url, decode_responses=True)
    assert not bus.exists(PLANTED)
    assert bus.hgetall(NODES_HASH)
    assert all(FORGED not in fields["data"] for _id, fields in bus.xrange(LOGS_STREAM))
    assert all(FORGED not in line["line"] for line in client_b.logs(victim))
    # And the replica was given no way in.
    env = json.dumps(report["env"])
    assert password not in env and not [name for name in report["env"] if "REDIS" in name]

    assert_password_kept(stack, password)


def assert_password_kept(stack: Stack, password: str) -> None:
    """The password is in a 0600 file, passed to redis-server in a 0600 file, on no
    process's command line and in no log of the stack's services."""
    assert os.stat(stack.settings.redis_password_file).st_mode & 0o777 == 0o600
    assert len(password) >= 32
    # redis-server retitles itself (its /proc cmdline becomes "redis-server HOST:PORT"):
    # the argv it was started with is the stack's record.
    argv, _env = stack.argv["redis"]
    config = Path(next(arg for arg in argv if arg.endswith(".conf")))
    assert not [arg for arg in argv if password in arg]
    assert os.stat(config).st_mode & 0o777 == 0o600
    assert os.stat(config.parent).st_mode & 0o777 == 0o700
    for name, process in stack.children:
        assert password.encode() not in Path(f"/proc/{process.pid}/cmdline").read_bytes(), name
    for log in stack.log_dir.glob("*.log"):
        assert password not in log.read_text(errors="replace"), log.name
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=stack.settings.EMBEDDED_REDIS_PORT).ping()
