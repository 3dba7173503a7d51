"""Benchmark webhooks: from an event committed to the receiver having it.

Starts the api and a scheduler (processes, on a PostgreSQL database of their own), a real
HTTP receiver on 127.0.0.1 (tests/webhook_receiver.py), one webhook, then records
`--events` test events (`POST /webhooks/{id}/ping`, committed by the api like any event's
transaction) a little apart, and times each from its `created_at` (set in the committing
transaction) to the moment the receiver read its body. The sender looks for due
deliveries every COHORT_WEBHOOK_DELIVERY_INTERVAL seconds (`--interval`, 1 by default),
which bounds the wait.

    .venv/bin/python bench/webhooks.py --redis redis://127.0.0.1:6379/15 --events 200

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust) and a Redis it may flush.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.stack import Stack  # noqa: E402
from cohort.client import Client  # noqa: E402
from tests.conftest import create_database, drop_database  # noqa: E402
from tests.e2e.conftest import E2E_TOKEN, free_port, wait_for  # noqa: E402
from tests.webhook_receiver import Receiver  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", required=True)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    import redis

    redis.Redis.from_url(args.redis).flushdb()
    name = f"cohort_bench_hooks_{free_port()}"
    receiver = Receiver().up()
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(
            {
                "COHORT_DATABASE_URL": create_database(name),
                "COHORT_REDIS_URL": args.redis,
                "COHORT_DATA_DIR": tmp,
                "COHORT_API_PORT": str(free_port()),
                "COHORT_BOOTSTRAP_TOKEN": E2E_TOKEN,
                "COHORT_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.1/32",
                "COHORT_WEBHOOK_DELIVERY_INTERVAL": str(args.interval),
            },
            quiet=True,
        )
        stack.start(("api", "scheduler"))
        try:
            client = Client(stack.url, stack.token)
            hook = client.create_webhook(receiver.url, ["job.succeeded"])
            for _ in range(args.events):
                client.ping_webhook(hook.id)
                time.sleep(0.02)
            wait_for(lambda: len(receiver.bodies()) >= args.events, 120, "every event")
        finally:
            stack.stop()
            drop_database(name)
            receiver.down()
    delays = sorted(
        got.at - dt.datetime.fromisoformat(got.json["created_at"]).timestamp()
        for got in receiver.bodies()
    )
    p99 = delays[min(len(delays) - 1, round(0.99 * len(delays)))]
    print(
        f"{len(delays)} events, COHORT_WEBHOOK_DELIVERY_INTERVAL={args.interval:g}s: "
        f"committed -> received p50 {statistics.median(delays) * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms, max {delays[-1] * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
