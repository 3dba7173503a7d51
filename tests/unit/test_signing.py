"""The signing module: node keys, sealed messages to nodes, signed events and heartbeats."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.wire.events import ReplicaExited, ReplicaStarted
from services.wire.replica import (
    CHECKPOINT_TASK,
    CLEANUP_TASK,
    START_TASK,
    STOP_TASK,
    CheckpointReplica,
    CleanupJob,
    ReplicaSpec,
    StartReplica,
    StopReplica,
)
from services.wire.signing import (
    HEARTBEAT,
    Keyring,
    MissingKey,
    Refused,
    check_node_key,
    check_signing_key,
    node_key,
    seal,
    seal_message,
    sign_event,
    unseal,
    verify_event,
)

SIGNING_KEY = "s" * 40
NOW = 1_800_000_000.0
START = StartReplica("node-a", ReplicaSpec(7, 1, 0, 1, "mlp_digits", "one_device"))


def test_a_node_key_is_hmac_sha256_of_the_node_id_under_the_signing_key() -> None:
    expected = hmac.new(SIGNING_KEY.encode(), b"node:node-a", hashlib.sha256).hexdigest()
    assert node_key(SIGNING_KEY, "node-a") == expected
    assert node_key(SIGNING_KEY, "node-b") != expected
    assert node_key("t" * 40, "node-a") != expected
    assert Keyring(SIGNING_KEY).node("node-a") == expected


@pytest.mark.parametrize("key", ["", "short", "x" * 31])
def test_a_signing_key_under_32_characters_is_refused_naming_the_variable(key: str) -> None:
    with pytest.raises(MissingKey, match="COHORT_SIGNING_KEY"):
        check_signing_key(key)
    with pytest.raises(MissingKey):
        Keyring(key)
    with pytest.raises(MissingKey):
        node_key(key, "node-a")


@pytest.mark.parametrize("key", ["", "ab" * 31, "AB" * 32, "zz" * 32, "ab" * 33])
def test_a_node_key_must_be_what_node_key_prints(key: str) -> None:
    with pytest.raises(MissingKey, match="cohort node-key node-a"):
        check_node_key(key, "node-a")


def test_a_sealed_message_opens_with_its_nodes_key_for_its_purpose() -> None:
    key = node_key(SIGNING_KEY, "node-a")
    raw = seal_message(key, START, now=NOW)
    sealed = unseal(raw, key, purpose=START_TASK, node_id="node-a", max_age=60, now=NOW + 59)
    assert StartReplica.decode(sealed.body) == START
    assert sealed.ts == NOW


@pytest.mark.parametrize(
    ("message", "purpose"),
    [
        (StopReplica("node-a", 7, 1, 0), STOP_TASK),
        (CleanupJob("node-a", 7), CLEANUP_TASK),
        (CheckpointReplica("node-a", 7, 1, 0), CHECKPOINT_TASK),
    ],
)
def test_stop_and_cleanup_messages_are_sealed_for_their_own_task(
    message: Any, purpose: str
) -> None:
    key = node_key(SIGNING_KEY, "node-a")
    raw = seal_message(key, message, now=NOW)
    assert unseal(raw, key, purpose=purpose, node_id="node-a").body == message.encode()
    with pytest.raises(Refused) as caught:  # not a start, however validly signed
        unseal(raw, key, purpose=START_TASK, node_id="node-a")
    assert caught.value.reason == "bad signature"


@pytest.mark.parametrize(
    "raw", [START.encode(), "", "not json", "[]", "{}", json.dumps({"body": START.encode()})]
)
def test_an_unsealed_message_is_refused_as_unsigned(raw: str) -> None:
    with pytest.raises(Refused) as caught:
        unseal(raw, node_key(SIGNING_KEY, "node-a"), purpose=START_TASK, node_id="node-a")
    assert caught.value.reason == "unsigned"


def test_a_message_sealed_with_another_key_is_refused_as_badly_signed() -> None:
    raw = seal_message(node_key("t" * 40, "node-a"), START, now=NOW)
    with pytest.raises(Refused) as caught:
        unseal(raw, node_key(SIGNING_KEY, "node-a"), purpose=START_TASK, node_id="node-a")
    assert caught.value.reason == "bad signature"


def test_a_message_for_another_node_is_refused_even_with_that_nodes_valid_seal() -> None:
    # Node b's agent reads node a's message (sealed with a's key): refused before any key.
    raw = seal_message(node_key(SIGNING_KEY, "node-a"), START, now=NOW)
    with pytest.raises(Refused) as caught:
        unseal(raw, node_key(SIGNING_KEY, "node-b"), purpose=START_TASK, node_id="node-b")
    assert caught.value.reason == "another node"


@pytest.mark.parametrize("field", ["body", "ts", "node_id", "purpose", "sig"])
def test_changing_any_part_of_a_sealed_message_breaks_it(field: str) -> None:
    key = node_key(SIGNING_KEY, "node-a")
    sealed = json.loads(seal_message(key, START, now=NOW))
    changed = {
        "body": START.encode().replace('"index":0', '"index":1'),
        "ts": NOW + 1,
        "node_id": "node-b",
        "purpose": STOP_TASK,
        "sig": "0" * 64,
    }[field]
    assert sealed[field] != changed
    raw = json.dumps({**sealed, field: changed})
    with pytest.raises(Refused):
        unseal(raw, key, purpose=START_TASK, node_id="node-a", max_age=60, now=NOW)


def test_a_replayed_old_message_is_refused_as_stale_and_one_from_the_future_too() -> None:
    key = node_key(SIGNING_KEY, "node-a")
    raw = seal_message(key, START, now=NOW)
    with pytest.raises(Refused) as caught:
        unseal(raw, key, purpose=START_TASK, node_id="node-a", max_age=120, now=NOW + 121)
    assert caught.value.reason == "stale" and "121s ago" in str(caught.value)
    with pytest.raises(Refused) as caught:
        unseal(raw, key, purpose=START_TASK, node_id="node-a", max_age=120, now=NOW - 121)
    assert caught.value.reason == "from the future"


@given(st.text(max_size=50), st.text(max_size=200), st.floats(0, 4e9))
def test_whatever_is_sealed_opens_unchanged(node_id: str, body: str, ts: float) -> None:
    key = "cd" * 32
    raw = seal(key, purpose=HEARTBEAT, node_id=node_id, body=body, now=ts)
    sealed = unseal(raw, key, purpose=HEARTBEAT, node_id=node_id)
    assert (sealed.node_id, sealed.body, sealed.ts) == (node_id, body, ts)


def test_parts_are_length_prefixed_so_shifting_text_between_them_breaks_the_signature() -> None:
    key = "cd" * 32
    assert sign_event(key, "node-a", "replica_exited", "{}") != sign_event(
        key, "node-a", "replica_exite", "d{}"
    )
    assert sign_event(key, "node-a", "x", "y") != sign_event(key, "node-ax", "", "y")


def test_an_event_verifies_only_with_the_key_of_the_node_it_names() -> None:
    event = ReplicaExited("node-a", 7, 1, 0, 1, NOW, "boom")
    entry = {k: str(v) for k, v in event.entry().items()}
    key_a, key_b = node_key(SIGNING_KEY, "node-a"), node_key(SIGNING_KEY, "node-b")
    signed = {**entry, "sig": sign_event(key_a, "node-a", event.KIND, entry["data"])}
    verify_event(key_a, "node-a", signed)
    with pytest.raises(Refused) as caught:
        verify_event(key_a, "node-a", entry)
    assert caught.value.reason == "unsigned"
    forged = {**entry, "sig": sign_event(key_b, "node-b", event.KIND, entry["data"])}
    with pytest.raises(Refused) as caught:  # node b signing an exit that names node a
        verify_event(key_a, "node-a", forged)
    assert caught.value.reason == "bad signature"
    # The signature covers the kind and the data: a started event cannot be made of it.
    started = ReplicaStarted("node-a", 7, 1, 0, 42, NOW).entry()
    with pytest.raises(Refused):
        verify_event(
            key_a, "node-a", {**{k: str(v) for k, v in started.items()}, "sig": signed["sig"]}
        )


def test_openssl_derives_the_same_node_key_as_the_compose_file_says() -> None:
    # docker-compose.yml tells operators to derive COHORT_NODE_KEY with openssl.
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.fail("openssl is not installed: the compose file's recipe cannot be checked")
    done = subprocess.run(
        ["openssl", "dgst", "-sha256", "-hmac", SIGNING_KEY, "-r"],
        input=b"node:agent-1",
        capture_output=True,
        check=True,
    )
    assert done.stdout.split()[0].decode() == node_key(SIGNING_KEY, "agent-1")
