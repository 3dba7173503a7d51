"""Property tests of the pure placer: random clusters and queues, the invariants always hold."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from services.cluster.fair_share import ProjectState
from services.cluster.placement import GangRequest, NodeCapacity, PlacementResult, pick_ports, place


@st.composite
def clusters(draw: st.DrawFn) -> list[NodeCapacity]:
    nodes = []
    for i in range(draw(st.integers(0, 6))):
        slots = draw(st.integers(0, 4))
        gpus = draw(st.integers(0, 4))
        free_gpus = draw(st.sets(st.integers(0, gpus - 1))) if gpus else set()
        nodes.append(
            NodeCapacity(
                id=f"n{i}",
                address=f"10.0.0.{i}",
                slots=slots,
                free_slots=draw(st.integers(0, slots)),
                gpus=gpus,
                free_gpus=tuple(sorted(free_gpus)),
            )
        )
    return nodes


@st.composite
def queues(draw: st.DrawFn) -> list[GangRequest]:
    return [
        GangRequest(
            job_id=i,
            replicas=draw(st.integers(1, 5)),
            gpus_per_replica=draw(st.sampled_from([0, 0, 1, 2, 3])),
            priority=draw(st.integers(-1, 1)),
            seq=draw(st.integers(0, 50)),
            policy=draw(st.sampled_from(["pack", "spread"])),
            project=draw(st.integers(0, 2)),
        )
        for i in range(draw(st.integers(0, 12)))
    ]


@st.composite
def holdings(draw: st.DrawFn) -> dict[int, ProjectState]:
    """What projects 0..2 hold when the pass starts (no quotas)."""
    states = {}
    for project in range(3):
        cpu, gpus = draw(st.integers(0, 6)), draw(st.integers(0, 6))
        states[project] = ProjectState(replicas=cpu + gpus, cpu_slots=cpu, gpus=gpus)
    return states


def run(
    queue: list[GangRequest],
    nodes: list[NodeCapacity],
    projects: dict[int, ProjectState] | None = None,
) -> PlacementResult:
    return place(queue, nodes, projects)


@settings(max_examples=400, deadline=None)
@given(clusters(), queues())
def test_whole_gangs_only_and_every_job_answered(
    nodes: list[NodeCapacity], queue: list[GangRequest]
) -> None:
    result = run(queue, nodes)
    for request in queue:
        placed = request.job_id in result.assignments
        assert placed != (request.job_id in result.waiting)
        if placed:
            assert len(result.assignments[request.job_id]) == request.replicas
    assert sorted(result.positions.values()) == list(range(1, len(result.waiting) + 1))


@settings(max_examples=400, deadline=None)
@given(clusters(), queues())
def test_never_over_commits_a_slot_a_gpu_or_a_port(
    nodes: list[NodeCapacity], queue: list[GangRequest]
) -> None:
    result = run(queue, nodes)
    by_id = {n.id: n for n in nodes}
    cpu_used: Counter[str] = Counter()
    gpus_used: dict[str, list[int]] = {}
    ports_used: dict[str, set[int]] = {}
    requests = {r.job_id: r for r in queue}
    for job_id, placements in result.assignments.items():
        request = requests[job_id]
        for p in placements:
            assert p.address == by_id[p.node_id].address
            if request.gpus_per_replica:
                assert len(p.gpu_ids) == request.gpus_per_replica
                gpus_used.setdefault(p.node_id, []).extend(p.gpu_ids)
            else:
                assert p.gpu_ids == ()
                cpu_used[p.node_id] += 1
        # The scheduler's port rule on top of the placer: per node, never twice.
        for node_id in {p.node_id for p in placements}:
            count = sum(1 for p in placements if p.node_id == node_id)
            used = ports_used.setdefault(node_id, set())
            chosen = pick_ports(used, count, 31000, 31100)
            assert len(set(chosen)) == count and not used & set(chosen)
            used.update(chosen)
    for node_id, used in cpu_used.items():
        assert used <= by_id[node_id].free_slots
    for node_id, ids in gpus_used.items():
        assert len(ids) == len(set(ids)), "a GPU handed out twice"
        assert set(ids) <= set(by_id[node_id].free_gpus)


def _order(queue: list[GangRequest], result: PlacementResult) -> list[GangRequest]:
    """The queue in the order the placer considered it (checked by the next test)."""
    by_id = {r.job_id: r for r in queue}
    return [by_id[job_id] for job_id in result.order]


@settings(max_examples=400, deadline=None)
@given(clusters(), queues(), holdings())
def test_priority_first_then_each_projects_submission_order(
    nodes: list[NodeCapacity], queue: list[GangRequest], projects: dict[int, ProjectState]
) -> None:
    result = run(queue, nodes, projects)
    ordered = _order(queue, result)
    assert sorted(result.order) == sorted(r.job_id for r in queue)  # each once
    assert [r.priority for r in ordered] == sorted((r.priority for r in queue), reverse=True)
    for project in {r.project for r in queue}:
        for priority in {r.priority for r in queue}:
            mine = [r.seq for r in ordered if r.project == project and r.priority == priority]
            assert mine == sorted(mine)


@settings(max_examples=400, deadline=None)
@given(clusters(), queues(), holdings())
def test_a_waiting_job_is_never_overtaken_on_capacity_it_could_use(
    nodes: list[NodeCapacity], queue: list[GangRequest], projects: dict[int, ProjectState]
) -> None:
    result = run(queue, nodes, projects)
    ordered = _order(queue, result)
    total = {n.id: n for n in nodes}
    for i, blocked in enumerate(ordered):
        reason = result.waiting.get(blocked.job_id, "")
        if not reason or reason.startswith("unschedulable"):
            continue
        for later in ordered[i + 1 :]:
            if later.job_id not in result.assignments or later.kind != blocked.kind:
                continue
            for p in result.assignments[later.job_id]:
                node = total[p.node_id]
                capacity = node.gpus if blocked.gpus_per_replica else node.slots
                assert capacity < blocked.per, (
                    f"job {later.job_id} took {p.node_id}, which job {blocked.job_id} "
                    "ahead of it could use"
                )


@settings(max_examples=400, deadline=None)
@given(clusters(), queues(), holdings())
def test_the_head_starts_whenever_it_fits(
    nodes: list[NodeCapacity], queue: list[GangRequest], projects: dict[int, ProjectState]
) -> None:
    result = run(queue, nodes, projects)
    for head in _order(queue, result):
        if result.waiting.get(head.job_id, "").startswith("unschedulable"):
            continue
        if head.gpus_per_replica:
            room = sum(len(n.free_gpus) // head.per for n in nodes)
        else:
            room = sum(n.free_slots for n in nodes)
        assert (head.job_id in result.assignments) == (room >= head.replicas)
        break


@settings(max_examples=200, deadline=None)
@given(clusters(), queues())
def test_unschedulable_means_too_big_for_the_empty_cluster(
    nodes: list[NodeCapacity], queue: list[GangRequest]
) -> None:
    result = run(queue, nodes)
    for request in queue:
        if request.gpus_per_replica:
            room = sum(n.gpus // request.per for n in nodes)
        else:
            room = sum(n.slots for n in nodes)
        unschedulable = result.waiting.get(request.job_id, "").startswith("unschedulable")
        assert unschedulable == (room < request.replicas)
