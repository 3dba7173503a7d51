import json

import pytest

from services.cluster.tf_config import build_tf_config, compose, dumps, gang_roles, is_distributed

CASES = [
    (
        ["10.0.0.1:29500", "10.0.0.2:29500"],
        0,
        '{"cluster":{"worker":["10.0.0.1:29500","10.0.0.2:29500"]},"task":{"index":0,"type":"worker"}}',
    ),
    (
        ["10.0.0.1:29500", "10.0.0.2:29500"],
        1,
        '{"cluster":{"worker":["10.0.0.1:29500","10.0.0.2:29500"]},"task":{"index":1,"type":"worker"}}',
    ),
    (
        ["127.0.0.1:29500", "127.0.0.1:29501", "127.0.0.1:29502"],
        2,
        '{"cluster":{"worker":["127.0.0.1:29500","127.0.0.1:29501","127.0.0.1:29502"]},'
        '"task":{"index":2,"type":"worker"}}',
    ),
    (
        ["h1:1", "h2:2", "h3:3", "h4:4"],
        3,
        '{"cluster":{"worker":["h1:1","h2:2","h3:3","h4:4"]},"task":{"index":3,"type":"worker"}}',
    ),
]


@pytest.mark.parametrize(("addresses", "index", "expected"), CASES)
def test_exact_json(addresses: list[str], index: int, expected: str) -> None:
    config = build_tf_config(addresses, index)
    assert config is not None
    assert dumps(config) == expected


def test_every_replica_gets_the_same_cluster_in_index_order() -> None:
    addresses = ["a:1", "b:2", "c:3"]
    configs = [build_tf_config(addresses, i) for i in range(3)]
    assert all(c is not None and c["cluster"]["worker"] == addresses for c in configs)
    assert [c["task"]["index"] for c in configs if c] == [0, 1, 2]


def test_single_replica_has_no_tf_config() -> None:
    assert not is_distributed(1)
    assert build_tf_config(["a:1"], 0) is None


def test_index_out_of_range() -> None:
    with pytest.raises(ValueError, match="outside"):
        build_tf_config(["a:1", "b:2"], 2)


def test_loopback_refused_across_hosts() -> None:
    with pytest.raises(ValueError, match="loopback"):
        build_tf_config(["localhost:1", "10.0.0.2:2"], 0)


def test_json_round_trip() -> None:
    config = build_tf_config(["a:1", "b:2"], 1)
    assert config is not None
    assert json.loads(dumps(config)) == config


# -- every strategy and role shape (services/cluster/tf_config.compose) ---------------

PS_ROLES = {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1}
PS_ADDRESSES = ["h1:10", "h2:20", "h2:21", "h2:22", "h1:11"]  # chief, w0, w1, ps0, evaluator
PS_CLUSTER = '"cluster":{"chief":["h1:10"],"ps":["h2:22"],"worker":["h2:20","h2:21"]}'
STRATEGY_CASES = [
    ("one_device", 1, None, ["h1:10"], 0, None),
    ("mirrored", 1, None, ["h1:10"], 0, None),
    ("multi_worker_mirrored", 1, None, ["h1:10"], 0, None),
    (
        "multi_worker_mirrored",
        2,
        None,
        ["h1:10", "h2:20"],
        1,
        '{"cluster":{"worker":["h1:10","h2:20"]},"task":{"index":1,"type":"worker"}}',
    ),
    (
        "parameter_server",
        5,
        PS_ROLES,
        PS_ADDRESSES,
        0,
        "{" + PS_CLUSTER + ',"task":{"index":0,"type":"chief"}}',
    ),
    (
        "parameter_server",
        5,
        PS_ROLES,
        PS_ADDRESSES,
        1,
        "{" + PS_CLUSTER + ',"task":{"index":0,"type":"worker"}}',
    ),
    (
        "parameter_server",
        5,
        PS_ROLES,
        PS_ADDRESSES,
        2,
        "{" + PS_CLUSTER + ',"task":{"index":1,"type":"worker"}}',
    ),
    (
        "parameter_server",
        5,
        PS_ROLES,
        PS_ADDRESSES,
        3,
        "{" + PS_CLUSTER + ',"task":{"index":0,"type":"ps"}}',
    ),
    # The evaluator runs outside the training cluster: its TF_CONFIG names only itself.
    (
        "parameter_server",
        5,
        PS_ROLES,
        PS_ADDRESSES,
        4,
        '{"cluster":{"evaluator":["h1:11"]},"task":{"index":0,"type":"evaluator"}}',
    ),
    # No evaluator; two ps: ps indexes follow the gang's order.
    (
        "parameter_server",
        4,
        {"chief": 1, "worker": 1, "ps": 2},
        ["a:1", "b:2", "c:3", "d:4"],
        3,
        '{"cluster":{"chief":["a:1"],"ps":["c:3","d:4"],"worker":["b:2"]},'
        '"task":{"index":1,"type":"ps"}}',
    ),
]


@pytest.mark.parametrize(
    ("strategy", "replicas", "roles", "addresses", "index", "expected"), STRATEGY_CASES
)
def test_compose_exact_json(
    strategy: str,
    replicas: int,
    roles: dict[str, int] | None,
    addresses: list[str],
    index: int,
    expected: str | None,
) -> None:
    slots = gang_roles(strategy, replicas, roles)
    config = compose(strategy, slots, addresses, index)
    assert (None if config is None else dumps(config)) == expected


def test_gang_roles_orders_chief_workers_ps_evaluator() -> None:
    assert gang_roles("parameter_server", 5, PS_ROLES) == [
        ("chief", 0),
        ("worker", 0),
        ("worker", 1),
        ("ps", 0),
        ("evaluator", 0),
    ]
    assert gang_roles("multi_worker_mirrored", 3) == [("worker", 0), ("worker", 1), ("worker", 2)]


def test_gang_roles_must_add_up_to_the_gang() -> None:
    with pytest.raises(ValueError, match="add up to 5, not 4"):
        gang_roles("parameter_server", 4, PS_ROLES)
    with pytest.raises(ValueError, match="needs its roles"):
        gang_roles("parameter_server", 4, None)


def test_ps_cluster_across_hosts_refuses_loopback() -> None:
    slots = gang_roles("parameter_server", 3, {"chief": 1, "worker": 1, "ps": 1})
    with pytest.raises(ValueError, match="loopback"):
        compose("parameter_server", slots, ["127.0.0.1:1", "h2:2", "h2:3"], 0)


def test_every_ps_training_process_gets_the_same_cluster() -> None:
    slots = gang_roles("parameter_server", 5, PS_ROLES)
    clusters = [compose("parameter_server", slots, PS_ADDRESSES, i) for i in range(4)]
    assert all(
        c is not None and c["cluster"] == clusters[0]["cluster"]  # type: ignore[index]
        for c in clusters
    )
