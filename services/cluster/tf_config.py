"""TF_CONFIG composition: the one place that decides what each replica is told."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def is_distributed(num_workers: int) -> bool:
    """A one-replica job gets no TF_CONFIG (as Kubeflow's `isDistributed`)."""
    return num_workers > 1


def build_tf_config(worker_addresses: Sequence[str], index: int) -> dict[str, Any] | None:
    """The TF_CONFIG of replica `index` of a MultiWorkerMirroredStrategy gang.

    Every replica gets the same cluster list, ordered by replica index, and its
    own index; worker 0 is the chief. Addresses must be routable from the other
    nodes, so `localhost` is refused whenever the gang spans more than one host.
    """
    if not 0 <= index < len(worker_addresses):
        raise ValueError(f"index {index} outside a gang of {len(worker_addresses)}")
    if not is_distributed(len(worker_addresses)):
        return None
    hosts = {address.rsplit(":", 1)[0] for address in worker_addresses}
    if len(hosts) > 1 and hosts & {"localhost", "127.0.0.1", "::1", "[::1]"}:
        raise ValueError("a gang across hosts cannot use loopback addresses")
    return {
        "cluster": {"worker": list(worker_addresses)},
        "task": {"type": "worker", "index": index},
    }


def dumps(tf_config: dict[str, Any]) -> str:
    """The exact string put in the replica's environment."""
    return json.dumps(tf_config, separators=(",", ":"), sort_keys=True)
