"""TF_CONFIG composition: the one place that decides what each replica is told.

A gang is a list of processes, replica 0 first. Each process has a role and an index
among its role's processes (`gang_roles`), and its TF_CONFIG follows from its
strategy and role (`compose`):

* `one_device`, `mirrored`: one process, no TF_CONFIG;
* `multi_worker_mirrored`: every replica a `worker`, worker 0 the chief;
* `parameter_server`: replicas in the order chief, workers, ps, evaluator; the
  training processes share `cluster: {chief, worker, ps}` and each is told its task
  type and index; the evaluator runs outside the training cluster, so its TF_CONFIG
  names only itself (`cluster: {evaluator: [addr]}, task: {evaluator, 0}`), as
  TensorFlow's side-car evaluation expects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

# The training roles of a parameter_server cluster, in the gang's order.
PS_TRAINING_ROLES = ("chief", "worker", "ps")
PS_ROLES = (*PS_TRAINING_ROLES, "evaluator")
_LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]"}

RoleSlot = tuple[str, int]  # (role, index among that role's processes)


def is_distributed(num_workers: int) -> bool:
    """A one-replica job gets no TF_CONFIG (as Kubeflow's `isDistributed`)."""
    return num_workers > 1


def gang_roles(
    strategy: str, replicas: int, roles: Mapping[str, int] | None = None
) -> list[RoleSlot]:
    """(role, role index) of each replica of a gang, by replica index.

    parameter_server: chief first (replica 0, like every strategy's chief), then the
    workers, the ps and the evaluator; every other strategy: `worker`s only.
    """
    if strategy != "parameter_server":
        return [("worker", index) for index in range(replicas)]
    if roles is None:
        raise ValueError("a parameter_server gang needs its roles")
    slots = [(role, i) for role in PS_ROLES for i in range(int(roles.get(role, 0)))]
    if len(slots) != replicas:
        raise ValueError(f"roles add up to {len(slots)}, not {replicas} replicas")
    return slots


def _check_routable(addresses: Sequence[str]) -> None:
    hosts = {address.rsplit(":", 1)[0] for address in addresses}
    if len(hosts) > 1 and hosts & _LOOPBACK:
        raise ValueError("a gang across hosts cannot use loopback addresses")


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
    _check_routable(worker_addresses)
    return {
        "cluster": {"worker": list(worker_addresses)},
        "task": {"type": "worker", "index": index},
    }


def build_ps_tf_config(
    slots: Sequence[RoleSlot], addresses: Sequence[str], index: int
) -> dict[str, Any]:
    """The TF_CONFIG of replica `index` of a parameter_server gang (see the module)."""
    if len(slots) != len(addresses) or not 0 <= index < len(addresses):
        raise ValueError(f"index {index} outside a gang of {len(addresses)}")
    role, role_index = slots[index]
    if role == "evaluator":
        return {
            "cluster": {"evaluator": [addresses[index]]},
            "task": {"type": "evaluator", "index": 0},
        }
    cluster = {
        kind: [address for (r, _), address in zip(slots, addresses, strict=True) if r == kind]
        for kind in PS_TRAINING_ROLES
    }
    _check_routable([a for kind in PS_TRAINING_ROLES for a in cluster[kind]])
    return {"cluster": cluster, "task": {"type": role, "index": role_index}}


def compose(
    strategy: str, slots: Sequence[RoleSlot], addresses: Sequence[str], index: int
) -> dict[str, Any] | None:
    """The TF_CONFIG of replica `index` of a gang of `strategy` (None: no TF_CONFIG)."""
    if strategy == "parameter_server":
        return build_ps_tf_config(slots, addresses, index)
    # one_device and mirrored run one replica: build_tf_config gives it none.
    return build_tf_config(addresses, index)


def dumps(tf_config: dict[str, Any]) -> str:
    """The exact string put in the replica's environment."""
    return json.dumps(tf_config, separators=(",", ":"), sort_keys=True)
