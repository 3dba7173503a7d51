"""Multi-host, for real: two node agents in two network namespaces, each with its own
address, and one 2-replica job spread across both. Its TF_CONFIG lists the two
namespace addresses, and the gang trains over the link between them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from cli.stack import Stack
from cohort.client import Client
from tests.capabilities import need_namespaces
from tests.e2e.conftest import PORT_BASE, free_port, wait_terminal
from tests.e2e.multinode import redis_and_database, start_agent, stop_agent, wait_nodes
from tests.e2e.netns import Machine, two_machines

pytestmark = pytest.mark.e2e


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Client, list[Machine]]]:
    """api + scheduler (+ a 0-slot agent) on the host, one 1-slot agent per namespace."""
    with ExitStack() as cleanup:  # undone in reverse: agents, stack, db, redis, namespaces
        # Skipped only where namespaces cannot exist; as root, a failing `ip` fails.
        need_namespaces()
        hosts, machines = cleanup.enter_context(two_machines())
        port, url = redis_and_database(cleanup, hosts, tmp_path, "cohort_e2e")
        stack = Stack(
            {
                "COHORT_DATABASE_URL": url,
                "COHORT_REDIS_URL": f"redis://127.0.0.1:{port}/0",
                "COHORT_DATA_DIR": str(tmp_path / "host"),
                "COHORT_API_PORT": str(free_port()),
                "COHORT_NODE_ID": "e2e-host",
                "COHORT_NODE_SLOTS": "0",
                "COHORT_PORT_RANGE_START": PORT_BASE,
                "COHORT_BOOTSTRAP_TOKEN": "e2e-bootstrap-token-for-tests-only",
            },
            quiet=True,
        )
        stack.start()
        cleanup.callback(stack.stop)
        client = Client(stack.url, stack.token)
        # Agents hold no SQL credentials; they reach Redis over their own link.
        env = {k: v for k, v in stack.env.items() if k != "COHORT_DATABASE_URL"}
        for machine, host in zip(machines, hosts, strict=True):
            agent = start_agent(
                env,
                machine.netns,
                1,
                tmp_path / machine.netns,
                address=machine.address,
                prefix=machine.prefix,
                COHORT_REDIS_URL=f"redis://{host}:{port}/0",
            )
            cleanup.callback(stop_agent, agent)
        wait_nodes(client, {m.netns for m in machines})
        yield client, machines


def test_one_gang_across_two_namespaces(
    cluster: tuple[Client, list[Machine]], tmp_path: Path
) -> None:
    client, machines = cluster
    job = client.submit(
        {
            "name": "two-hosts",
            "replicas": 2,
            "placement": "spread",
            "hyperparameters": {"epochs": 1, "steps_per_epoch": 5},
        }
    )
    done = wait_terminal(client, job["id"], timeout=300)
    assert done["status"] == "succeeded", (done["reason"], done["replica_list"])
    replicas = done["replica_list"]
    assert sorted(r["node_id"] for r in replicas) == sorted(m.netns for m in machines)
    workers = replicas[0]["tf_config"]["cluster"]["worker"]
    assert sorted(w.rsplit(":", 1)[0] for w in workers) == sorted(m.address for m in machines)
    by_node = {m.netns: m.address for m in machines}
    for r in replicas:  # each replica listens on its own machine's address
        assert r["address"].rsplit(":", 1)[0] == by_node[r["node_id"]]
        assert r["tf_config"]["cluster"]["worker"] == workers
    assert replicas[0]["tf_config"]["task"] == {"type": "worker", "index": 0}  # the chief
    for r in replicas:  # each trained in a gang of two, from its own machine's data dir
        log = (
            tmp_path
            / r["node_id"]
            / "jobs"
            / str(done["id"])
            / "logs"
            / "attempt-1"
            / f"replica-{r['index']}.log"
        ).read_text()
        assert "num_replicas_in_sync=2" in log
