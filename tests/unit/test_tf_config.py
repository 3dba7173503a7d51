import json

import pytest

from services.cluster.tf_config import build_tf_config, dumps, is_distributed

CASES = [
    (["10.0.0.1:29500", "10.0.0.2:29500"], 0,
     '{"cluster":{"worker":["10.0.0.1:29500","10.0.0.2:29500"]},"task":{"index":0,"type":"worker"}}'),
    (["10.0.0.1:29500", "10.0.0.2:29500"], 1,
     '{"cluster":{"worker":["10.0.0.1:29500","10.0.0.2:29500"]},"task":{"index":1,"type":"worker"}}'),
    (["127.0.0.1:29500", "127.0.0.1:29501", "127.0.0.1:29502"], 2,
     '{"cluster":{"worker":["127.0.0.1:29500","127.0.0.1:29501","127.0.0.1:29502"]},'
     '"task":{"index":2,"type":"worker"}}'),
    (["h1:1", "h2:2", "h3:3", "h4:4"], 3,
     '{"cluster":{"worker":["h1:1","h2:2","h3:3","h4:4"]},"task":{"index":3,"type":"worker"}}'),
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
