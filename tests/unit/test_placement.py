from services.cluster.fair_share import ProjectState
from services.cluster.placement import (
    NO_ENGINE,
    UNSCHEDULABLE,
    GangRequest,
    NodeCapacity,
    pick_ports,
    place,
)


def node(
    id: str, free: int, slots: int | None = None, gpus: int = 0, free_gpus: tuple[int, ...] = ()
) -> NodeCapacity:
    return NodeCapacity(
        id=id,
        address=f"10.0.0.{id[-1]}",
        slots=slots or free,
        free_slots=free,
        gpus=gpus,
        free_gpus=free_gpus,
    )


def test_whole_gang_on_one_node_when_it_fits() -> None:
    result = place([GangRequest(1, 2)], [node("n1", 2), node("n2", 2)])
    assert [p.node_id for p in result.assignments[1]] == ["n1", "n1"]


def test_gang_spans_nodes_when_needed() -> None:
    result = place([GangRequest(1, 3)], [node("n1", 2), node("n2", 2)])
    assert sorted(p.node_id for p in result.assignments[1]) == ["n1", "n1", "n2"]


def test_never_a_partial_gang() -> None:
    result = place([GangRequest(1, 3)], [node("n1", 1, slots=2), node("n2", 1, slots=2)])
    assert 1 not in result.assignments
    assert result.waiting[1] == "needs 3 CPU slots on ≥2 nodes; 2 CPU slots free"
    assert result.positions[1] == 1


def test_priority_then_submission_order() -> None:
    queue = [GangRequest(1, 2, priority=0, seq=1), GangRequest(2, 2, priority=5, seq=2)]
    result = place(queue, [node("n1", 2)])
    assert list(result.assignments) == [2]
    assert result.waiting[1]


def test_head_of_line_blocks_smaller_jobs_behind_it() -> None:
    queue = [GangRequest(1, 4, seq=1), GangRequest(2, 1, seq=2)]
    result = place(queue, [node("n1", 3, slots=4)])
    assert result.assignments == {}
    assert (
        result.waiting[2] == "needs 1 CPU slots on ≥1 node; 3 CPU slots free, "
        "held for job 1 ahead in the queue"
    )
    assert result.positions == {1: 1, 2: 2}


def test_unschedulable_job_does_not_block_the_queue() -> None:
    queue = [GangRequest(1, 16, seq=1), GangRequest(2, 2, seq=2)]
    result = place(queue, [node("n1", 2), node("n2", 2)])
    assert list(result.assignments) == [2]
    assert result.waiting[1].startswith("unschedulable: needs 16 CPU slots")
    assert result.waiting[1].endswith("the cluster has 4 CPU slots")


def test_gpus_are_disjoint() -> None:
    nodes = [node("n1", 4, gpus=4, free_gpus=(0, 1, 2, 3))]
    result = place([GangRequest(1, 2, gpus_per_replica=2)], nodes)
    gpu_sets = [p.gpu_ids for p in result.assignments[1]]
    assert gpu_sets == [(0, 1), (2, 3)]


def test_gpu_job_unschedulable_without_gpus() -> None:
    result = place([GangRequest(1, 1, gpus_per_replica=1)], [node("n1", 4)])
    assert result.waiting[1].startswith("unschedulable: needs 1 GPUs")


def test_no_nodes() -> None:
    result = place([GangRequest(1, 1)], [])
    assert result.waiting[1].startswith("unschedulable")


def test_pick_ports_skips_used() -> None:
    assert pick_ports({29500, 29502}, 3, 29500, 29510) == [29501, 29503, 29504]


def gpu_node(
    id: str, gpus: int, free: tuple[int, ...] | None = None, slots: int = 0
) -> NodeCapacity:
    ids = tuple(range(gpus)) if free is None else free
    return NodeCapacity(
        id=id, address=f"10.0.1.{id[-1]}", slots=slots, free_slots=slots, gpus=gpus, free_gpus=ids
    )


def test_pack_prefers_the_smallest_node_that_holds_the_gang() -> None:
    nodes = [node("n1", 4), node("n2", 2), node("n3", 3)]
    result = place([GangRequest(1, 2)], nodes)
    assert [p.node_id for p in result.assignments[1]] == ["n2", "n2"]


def test_pack_fills_the_fullest_nodes_first_when_it_must_span() -> None:
    nodes = [node("n1", 2), node("n2", 4), node("n3", 3)]
    result = place([GangRequest(1, 6)], nodes)
    assert sorted({p.node_id for p in result.assignments[1]}) == ["n2", "n3"]


def test_spread_puts_one_replica_per_node() -> None:
    nodes = [node("n1", 4), node("n2", 2), node("n3", 3)]
    result = place([GangRequest(1, 3, policy="spread")], nodes)
    assert sorted(p.node_id for p in result.assignments[1]) == ["n1", "n2", "n3"]


def test_spread_doubles_up_only_when_nodes_run_out() -> None:
    result = place([GangRequest(1, 3, policy="spread")], [node("n1", 2), node("n2", 2)])
    assert sorted(p.node_id for p in result.assignments[1]) == ["n1", "n1", "n2"]


def test_cpu_job_backfills_while_a_gpu_job_waits() -> None:
    nodes = [gpu_node("n1", 2, free=(1,), slots=2)]
    queue = [GangRequest(1, 1, gpus_per_replica=2, seq=1), GangRequest(2, 2, seq=2)]
    result = place(queue, nodes)
    assert list(result.assignments) == [2]
    assert result.waiting[1] == "needs 2 GPUs (2 per replica × 1) on ≥1 node; 1 GPUs free"


def test_small_gpu_job_backfills_only_on_nodes_the_head_cannot_use() -> None:
    # Job 1 needs 4 GPUs per replica; n1 (4 GPUs) is busy, n2 (2 GPUs) can never host it.
    nodes = [gpu_node("n1", 4, free=(3,)), gpu_node("n2", 2)]
    queue = [
        GangRequest(1, 1, gpus_per_replica=4, seq=1),
        GangRequest(2, 1, gpus_per_replica=1, seq=2),
        GangRequest(3, 1, gpus_per_replica=1, seq=3),
        GangRequest(4, 1, gpus_per_replica=1, seq=4),
    ]
    result = place(queue, nodes)
    assert sorted(result.assignments) == [2, 3]
    assert {p.node_id for j in (2, 3) for p in result.assignments[j]} == {"n2"}
    assert result.waiting[4].endswith("held for job 1 ahead in the queue")


def test_gpu_job_bigger_than_any_node_is_unschedulable() -> None:
    nodes = [gpu_node("n1", 4), gpu_node("n2", 4)]
    result = place([GangRequest(1, 1, gpus_per_replica=8)], nodes)
    assert result.waiting[1] == (
        "unschedulable: needs 8 GPUs (8 per replica × 1), "
        "the cluster has 8 GPUs, at most 4 on one node"
    )


def test_unschedulable_counts_the_whole_cluster() -> None:
    nodes = [gpu_node("n1", 4), gpu_node("n2", 4)]
    result = place([GangRequest(1, 16, gpus_per_replica=1)], nodes)
    assert result.waiting[1] == (
        "unschedulable: needs 16 GPUs (1 per replica × 16), the cluster has 8 GPUs"
    )


def test_another_projects_job_ahead_is_not_named() -> None:
    queue = [GangRequest(1, 4, seq=1, project=7), GangRequest(2, 1, seq=2, project=8)]
    result = place(queue, [node("n1", 3, slots=4)])
    assert (
        result.waiting[2] == "needs 1 CPU slots on ≥1 node; 3 CPU slots free, "
        "held for a job of another project ahead in the queue"
    )


def test_running_quotas_make_a_job_wait_with_the_reason() -> None:
    queue = [
        GangRequest(1, 2, seq=1, project=1),
        GangRequest(2, 1, seq=2, project=1),
        GangRequest(3, 1, gpus_per_replica=2, seq=3, project=2),
        GangRequest(4, 1, seq=4, project=2),
    ]
    projects = {
        1: ProjectState(replicas=3, cpu_slots=3, max_replicas=4),
        2: ProjectState(replicas=1, gpus=2, max_gpus=3),
    }
    result = place(queue, [node("n1", 8, gpus=4, free_gpus=(0, 1, 2, 3))], projects)
    assert result.waiting[1] == "project quota: 3 of 4 running replicas in use"
    # Behind it, a job that would fit the quota waits too: it would take the room job 1
    # waits for.
    assert result.waiting[2] == "project quota: 3 of 4 running replicas in use"
    assert result.waiting[3] == "project quota: 2 of 3 GPUs in use"
    assert list(result.assignments) == [4]  # a CPU job is not held by the GPU quota
    assert result.positions == {1: 1, 2: 2, 3: 3}


# -- jobs with an image: nodes whose agent has a container engine only ------------------


def test_a_job_with_an_image_goes_only_to_a_node_with_an_engine() -> None:
    nodes = [
        NodeCapacity("plain", "10.0.0.1", 4, 4),
        NodeCapacity("box", "10.0.0.2", 2, 2, engine="docker"),
    ]
    result = place([GangRequest(1, 2, container=True), GangRequest(2, 2)], nodes)
    assert [p.node_id for p in result.assignments[1]] == ["box", "box"]
    assert [p.node_id for p in result.assignments[2]] == ["plain", "plain"]


def test_a_job_with_an_image_waits_saying_why_while_no_node_has_an_engine() -> None:
    nodes = [NodeCapacity("plain", "10.0.0.1", 4, 4)]
    result = place([GangRequest(1, 2, container=True), GangRequest(2, 2)], nodes)
    assert result.waiting == {1: NO_ENGINE}
    assert "COHORT_CONTAINER_ENGINE" in NO_ENGINE
    assert [p.node_id for p in result.assignments[2]] == ["plain", "plain"]  # blocks nobody


def test_a_job_with_an_image_too_big_for_the_engine_nodes_is_unschedulable() -> None:
    nodes = [
        NodeCapacity("plain", "10.0.0.1", 8, 8),
        NodeCapacity("box", "10.0.0.2", 2, 2, engine="podman"),
    ]
    result = place([GangRequest(1, 4, container=True)], nodes)
    assert result.waiting[1].startswith(UNSCHEDULABLE)
    assert "the nodes that run containers have 2 CPU slots" in result.waiting[1]


def test_a_blocked_job_with_an_image_holds_back_only_the_engine_nodes() -> None:
    nodes = [
        NodeCapacity("plain", "10.0.0.1", 2, 2),
        NodeCapacity("box", "10.0.0.2", 2, 1, engine="docker"),
    ]
    result = place([GangRequest(1, 2, container=True), GangRequest(2, 1), GangRequest(3, 2)], nodes)
    assert 1 in result.waiting
    # What the image job can never use is not held for it; what it can is.
    assert [p.node_id for p in result.assignments[2]] == ["plain"]
    assert 3 in result.waiting and 3 not in result.assignments
