"""Every wire contract: decode(encode(x)) == x, and decode refuses malformed input, naming
the field."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.wire.batches import (
    INT_MAX,
    MAX_BEAT_AHEAD,
    LogBatch,
    MetricBatch,
    ProgressBeat,
)
from services.wire.contract import Contract, WireError
from services.wire.events import (
    NodeDraining,
    NodeHeartbeat,
    ReplicaExited,
    ReplicaStarted,
    Wake,
    decode_event,
)
from services.wire.replica import (
    CheckpointReplica,
    CleanupJob,
    EvaluationFiles,
    ReplicaLaunch,
    ReplicaSpec,
    StartReplica,
    StopReplica,
)

ids = st.integers(0, INT_MAX)
attempts = st.integers(1, INT_MAX)
seconds = st.floats(0, 4e9, allow_nan=False)
text = st.text(max_size=40)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=20,
)
json_objects = st.dictionaries(text, json_values, max_size=6)


@st.composite
def specs(draw: st.DrawFn) -> ReplicaSpec:
    replicas = draw(st.integers(1, 64))
    command = draw(st.none() | st.lists(text, min_size=1, max_size=4))
    return ReplicaSpec(
        draw(ids),
        draw(attempts),
        draw(st.integers(0, replicas - 1)),
        replicas,
        None if command is not None else draw(text.filter(bool)),
        draw(st.sampled_from(["multi_worker_mirrored", "mirrored", "one_device"])),
        draw(json_objects),
        bundle=draw(st.none() | st.from_regex(r"(sha256:)?[0-9a-f]{64}", fullmatch=True)),
        command=command,
        env=draw(st.dictionaries(text, text, max_size=3)),
        inputs=draw(st.dictionaries(text, text, max_size=3)),
        progress_timeout_seconds=draw(st.none() | st.integers(0, 10**6)),
    )


keys = st.tuples(ids, attempts, ids)
CONTRACTS: dict[type, st.SearchStrategy[Any]] = {
    ReplicaSpec: specs(),
    ReplicaLaunch: st.builds(
        ReplicaLaunch,
        specs(),
        st.lists(st.from_regex(r"[a-z0-9._-]{1,12}", fullmatch=True), max_size=4).map(
            lambda parts: Path("/", *parts)
        ),
        st.floats(min_value=0, max_value=1e6),
    ),
    StartReplica: st.builds(
        StartReplica,
        text,
        specs(),
        st.none() | json_objects,
        st.none() | st.integers(0, 65535),
        text,
    ),
    StopReplica: st.builds(StopReplica, text, ids, attempts, ids, seconds),
    CleanupJob: st.builds(CleanupJob, text, ids),
    CheckpointReplica: st.builds(CheckpointReplica, text, ids, attempts, ids),
    Wake: st.just(Wake()),
    NodeDraining: st.builds(NodeDraining, text, st.text(max_size=400), seconds),
    ReplicaStarted: st.builds(
        ReplicaStarted, text, ids, attempts, ids, st.integers(1, 2**22), seconds
    ),
    ReplicaExited: st.builds(
        ReplicaExited,
        text,
        ids,
        attempts,
        ids,
        st.integers(0, 255),
        seconds,
        st.text(max_size=400),
        st.booleans(),
    ),
    NodeHeartbeat: st.builds(
        NodeHeartbeat,
        st.text(max_size=80),
        st.text(max_size=150),
        ids,
        seconds,
        ids,
        st.lists(keys, max_size=5).map(tuple),
        st.lists(st.tuples(ids, attempts, ids, st.integers(0, 255)), max_size=5).map(tuple),
        st.lists(ids, max_size=80).map(tuple),
        st.lists(ids, max_size=100).map(tuple),
        st.text(max_size=150),
        st.lists(st.tuples(st.text(max_size=100), ids), max_size=70).map(tuple),
        st.lists(keys, max_size=5).map(tuple),
    ),
}


@pytest.mark.parametrize("cls", list(CONTRACTS), ids=lambda cls: cls.__name__)
@given(data=st.data())
def test_a_contract_decodes_what_it_encodes(cls: type[Contract], data: st.DataObject) -> None:
    message = data.draw(CONTRACTS[cls])
    assert type(message).decode(message.encode()) == message


@pytest.mark.parametrize("cls", list(CONTRACTS), ids=lambda cls: cls.__name__)
@given(data=st.data())
def test_a_contract_refuses_a_field_of_the_wrong_type_by_name(
    cls: type[Contract], data: st.DataObject
) -> None:
    message = data.draw(CONTRACTS[cls])
    fields = [f.name for f in dataclasses.fields(message)]
    if not fields:
        return
    name = data.draw(st.sampled_from(fields))
    raw = json.loads(message.encode())
    raw[name] = [["not-this"]]  # a value no field takes (`command` takes a list of str)
    with pytest.raises(WireError) as caught:
        cls.decode(json.dumps(raw))
    assert caught.value.field.split(".")[0] == name, caught.value
    assert name in str(caught.value)


@pytest.mark.parametrize(
    "cls", [c for c in CONTRACTS if c is not Wake], ids=lambda cls: cls.__name__
)
@given(data=st.data())
def test_a_contract_names_a_missing_field(cls: type[Contract], data: st.DataObject) -> None:
    message = data.draw(CONTRACTS[cls])
    required = [
        f.name
        for f in dataclasses.fields(message)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    name = data.draw(st.sampled_from(required))
    raw = json.loads(message.encode())
    del raw[name]
    with pytest.raises(WireError, match=f"{name}: Field required"):
        cls.decode(json.dumps(raw))


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (
            '{"job_id": "3", "attempt": 1, "index": 0, "replicas": 1, "trainer": "t", '
            '"strategy": "mirrored"}',
            "job_id",
        ),  # JSON types exactly: no "3" for 3
        (
            '{"job_id": 3.0, "attempt": 1, "index": 0, "replicas": 1, "trainer": "t", '
            '"strategy": "mirrored"}',
            "job_id",
        ),
        (
            '{"job_id": 3, "attempt": 0, "index": 0, "replicas": 1, "trainer": "t", '
            '"strategy": "mirrored"}',
            "attempt",
        ),
        (
            '{"job_id": 3, "attempt": 1, "index": 0, "replicas": 1, "trainer": "", '
            '"strategy": "mirrored"}',
            "trainer",
        ),
        (
            '{"job_id": 3, "attempt": 1, "index": 0, "replicas": 1, "trainer": "t", '
            '"strategy": "data_parallel"}',
            "strategy",
        ),
    ],
)
def test_the_spec_is_strict(raw: str, field: str) -> None:
    with pytest.raises(WireError) as caught:
        ReplicaSpec.decode(raw)
    assert caught.value.field == field


def test_the_spec_names_an_index_outside_the_gang() -> None:
    raw = (
        '{"job_id": 3, "attempt": 1, "index": 2, "replicas": 2, "trainer": "t", '
        '"strategy": "mirrored"}'
    )
    with pytest.raises(WireError, match="'index' 2 is out of range for 2 replicas"):
        ReplicaSpec.decode(raw)


@pytest.mark.parametrize(
    "rel", ["../x", "/etc/passwd", "a//b", "a/./b", "a/..", "a\\b", "a\nb", ""]
)
def test_an_evaluation_file_cannot_leave_its_directory(rel: str) -> None:
    # The agent fetches each under the job's inputs/model or inputs/holdout.
    with pytest.raises(WireError, match="relative path inside its directory"):
        ReplicaSpec.decode(
            ReplicaSpec(
                3, 1, 0, 1, "mlp_digits", "one_device",
                evaluation=EvaluationFiles(model={"ok.pb": "jobs/1/model/ok.pb"}, holdout={}),
            ).encode().replace('"ok.pb":', json.dumps(rel) + ":", 1)
        )  # fmt: skip
    spec = ReplicaSpec(
        3, 1, 0, 1, "mlp_digits", "one_device",
        evaluation=EvaluationFiles(model={"variables/v.index": "k"}, holdout={"part.csv": "d"}),
    )  # fmt: skip
    assert ReplicaSpec.decode(spec.encode()) == spec


def test_a_launch_needs_an_absolute_job_dir() -> None:
    spec = ReplicaSpec(3, 1, 0, 1, "mlp_digits", "one_device")
    raw = json.dumps({"spec": json.loads(spec.encode()), "job_dir": "relative/dir"})
    with pytest.raises(WireError) as caught:
        ReplicaLaunch.decode(raw)
    assert caught.value.field == "job_dir"


@pytest.mark.parametrize("raw", ["", "{not json", "[]", "null"])
def test_a_contract_refuses_what_is_not_a_json_object(raw: str) -> None:
    with pytest.raises(WireError):
        StopReplica.decode(raw)


@given(
    st.sampled_from(
        [
            Wake(),
            ReplicaStarted("n", 1, 1, 0, 10, 1.5),
            ReplicaExited("n", 1, 1, 0, 143, 1.5, "tail", True),
        ]
    )
)
def test_an_event_travels_as_a_stream_entry(event: Any) -> None:
    entry = event.entry()
    assert set(entry) == {"kind", "data"}
    assert decode_event(entry) == event


def test_an_unknown_event_kind_is_refused_by_name() -> None:
    with pytest.raises(WireError) as caught:
        decode_event({"kind": "replica_paused", "data": "{}"})
    assert caught.value.field == "kind"


def test_a_heartbeat_keeps_at_most_what_the_scheduler_reads() -> None:
    beat = NodeHeartbeat("n" * 100, "a", 2, 1.0, busy_ports=tuple(range(5000)))
    decoded = NodeHeartbeat.decode(json.dumps({**json.loads(beat.encode()), "node_id": "m" * 100}))
    assert decoded.node_id == "m" * 64 and len(decoded.busy_ports) == 2000


def test_a_heartbeat_carries_each_gpu_model_and_memory_clipped() -> None:
    beat = NodeHeartbeat(
        "n",
        "a",
        2,
        1.0,
        gpus=2,
        gpu_ids=(1, 0),
        gpu_models=(("NVIDIA A100-SXM4-40GB", 40960), ("x" * 500, 1)),
    )
    decoded = NodeHeartbeat.decode(beat.encode())
    assert decoded.gpu_models == (("NVIDIA A100-SXM4-40GB", 40960), ("x" * 96, 1))
    # An older agent's heartbeat (no models) still decodes.
    old = {k: v for k, v in json.loads(beat.encode()).items() if k != "gpu_models"}
    assert NodeHeartbeat.decode(json.dumps(old)).gpu_models == ()
    with pytest.raises(WireError):  # memory is a count, never negative
        NodeHeartbeat.decode(json.dumps({**old, "gpu_models": [["T4", -1]]}))


# -- batches: hand-decoded ------------------------------------------------------------

names = st.text(min_size=1, max_size=64).filter(lambda name: "\x00" not in name)
finite = st.floats(allow_nan=False, allow_infinity=False)
points = st.tuples(ids, st.none() | ids, names, finite, finite)
lines = st.tuples(ids, finite, st.text(max_size=200).filter(lambda line: "\x00" not in line))

BATCHES: dict[type, st.SearchStrategy[Any]] = {
    MetricBatch: st.builds(MetricBatch, ids, ids, ids, st.lists(points, max_size=50)),
    LogBatch: st.builds(LogBatch, ids, ids, ids, st.lists(lines, max_size=50)),
}


@pytest.mark.parametrize("cls", list(BATCHES), ids=lambda cls: cls.__name__)
@given(data=st.data())
def test_a_batch_decodes_what_it_encodes(cls: type[Any], data: st.DataObject) -> None:
    batch = data.draw(BATCHES[cls])
    assert cls.decode(batch.encode()) == batch


bad_points = st.sampled_from(
    [
        [1, None, "loss", "0.5", 1.0],
        [1, None, "loss", True, 1.0],
        [1, None, "", 1.0, 1.0],
        [1, None, "x" * 65, 1.0, 1.0],
        [1, None, "a\x00b", 1.0, 1.0],
        [-1, None, "loss", 1.0, 1.0],
        [INT_MAX + 1, None, "loss", 1.0, 1.0],
        [1.0, None, "loss", 1.0, 1.0],
        [1, 2**40, "loss", 1.0, 1.0],
        [1, None, "loss", 1.0, "soon"],
        [1, None, "loss", 1.0],
        "point",
        None,
        {"step": 1},
    ]
)


@given(batch=BATCHES[MetricBatch], bad=st.lists(bad_points, max_size=5), seed=st.randoms())
def test_a_metric_batch_drops_malformed_points_and_keeps_the_rest(
    batch: MetricBatch, bad: list[Any], seed: Any
) -> None:
    raw = orjson.loads(batch.encode())
    mixed = [(True, point) for point in raw["points"]] + [(False, point) for point in bad]
    seed.shuffle(mixed)
    decoded = MetricBatch.decode(orjson.dumps({**raw, "points": [p for _, p in mixed]}))
    assert decoded.points == [tuple(point) for good, point in mixed if good]


@pytest.mark.parametrize("cls", [MetricBatch, LogBatch])
@pytest.mark.parametrize(
    ("field", "value"),
    [("job_id", "3"), ("job_id", 2**40), ("attempt", -1), ("replica", None), ("replica", 1.0)],
)
def test_a_batch_refuses_a_bad_head_by_name(cls: type[Any], field: str, value: Any) -> None:
    raw = {"job_id": 3, "attempt": 1, "replica": 0, "points": [], "lines": [], field: value}
    with pytest.raises(WireError) as caught:
        cls.decode(json.dumps(raw))
    assert caught.value.field == field


def test_a_log_batch_cuts_long_lines_and_drops_nul() -> None:
    raw = json.dumps(
        {
            "job_id": 3,
            "attempt": 1,
            "replica": 0,
            "lines": [[1, 1.0, "x" * 5000], [2, 2, "a\x00b"], [3, "soon", "c"]],
        }
    )
    assert LogBatch.decode(raw).lines == [(1, 1.0, "x" * 4000), (2, 2.0, "ab")]


@given(
    st.builds(
        ProgressBeat, ids, attempts, ids, seconds, st.floats(0, MAX_BEAT_AHEAD, allow_nan=False)
    )
)
def test_a_progress_beat_decodes_what_it_encodes(beat: ProgressBeat) -> None:
    assert ProgressBeat.decode(*beat.encode()) == beat


def test_a_progress_beat_of_until_alone_vouches_nothing_ahead_and_ahead_is_bounded() -> None:
    assert ProgressBeat.decode("1:1:0", "12.5") == ProgressBeat(1, 1, 0, 12.5, 0.0)
    assert ProgressBeat.decode("1:1:0", "12.5 99999.0").ahead == MAX_BEAT_AHEAD


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("1:1", "1.0", "field"),
        ("a:1:0", "1.0", "field"),
        ("1:1:0", "soon", "until"),
        ("1:1:0", "inf", "until"),
        ("1:1:0", "nan", "until"),
        ("1:1:0", "1.0 -1.0", "ahead"),
        ("1:1:0", "1.0 soon", "ahead"),
        ("1:1:0", "1.0 nan", "ahead"),
        ("1:1:0", "1.0 2.0 3.0", "ahead"),
    ],
)
def test_a_progress_beat_refuses_malformed_input_by_name(
    field: str, value: str, named: str
) -> None:
    with pytest.raises(WireError) as caught:
        ProgressBeat.decode(field, value)
    assert caught.value.field == named


@pytest.mark.parametrize("field", ["01:1:1", "1:1", "1:1:1:1", "\u0661:1:1", "1:+1:1", "a:b:c"])
def test_a_beat_field_in_any_other_spelling_is_not_an_agents(field: str) -> None:
    with pytest.raises(WireError):
        ProgressBeat.key_of(field)
    with pytest.raises(WireError):
        ProgressBeat.parse(field, "1.0 0")
    assert ProgressBeat.key_of("3:1:0") == (3, 1, 0)
