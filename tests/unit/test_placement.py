from services.placement import GangRequest, NodeCapacity, pick_ports, place


def node(id: str, free: int, slots: int | None = None, gpus: int = 0,
         free_gpus: tuple[int, ...] = ()) -> NodeCapacity:
    return NodeCapacity(id=id, address=f"10.0.0.{id[-1]}", slots=slots or free, free_slots=free,
                        gpus=gpus, free_gpus=free_gpus)


def test_whole_gang_on_one_node_when_it_fits() -> None:
    result = place([GangRequest(1, 2)], [node("n1", 2), node("n2", 2)])
    assert [p.node_id for p in result.assignments[1]] == ["n1", "n1"]


def test_gang_spans_nodes_when_needed() -> None:
    result = place([GangRequest(1, 3)], [node("n1", 2), node("n2", 2)])
    assert sorted(p.node_id for p in result.assignments[1]) == ["n1", "n1", "n2"]


def test_never_a_partial_gang() -> None:
    result = place([GangRequest(1, 3)], [node("n1", 1, slots=2), node("n2", 1, slots=2)])
    assert 1 not in result.assignments
    assert "waiting for capacity" in result.waiting[1]
    assert "2 CPU slots free" in result.waiting[1]


def test_priority_then_submission_order() -> None:
    queue = [GangRequest(1, 2, priority=0, seq=1), GangRequest(2, 2, priority=5, seq=2)]
    result = place(queue, [node("n1", 2)])
    assert list(result.assignments) == [2]
    assert result.waiting[1]


def test_head_of_line_blocks_smaller_jobs_behind_it() -> None:
    queue = [GangRequest(1, 4, seq=1), GangRequest(2, 1, seq=2)]
    result = place(queue, [node("n1", 3, slots=4)])
    assert result.assignments == {}
    assert result.waiting[2] == "waiting behind job 1"


def test_unschedulable_job_does_not_block_the_queue() -> None:
    queue = [GangRequest(1, 16, seq=1), GangRequest(2, 2, seq=2)]
    result = place(queue, [node("n1", 2), node("n2", 2)])
    assert list(result.assignments) == [2]
    assert result.waiting[1].startswith("unschedulable: needs 16 CPU slots")
    assert "4 CPU slots in all" in result.waiting[1]


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
