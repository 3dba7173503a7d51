"""A parameter_server gang placed whole, by parts: the chief with its evaluator,
and chief or ps kept apart when the job asks."""

from services.cluster.placement import GangRequest, NodeCapacity, place
from services.cluster.placement_pool import Pool
from services.cluster.placement_roles import GangPart, choose_parts, ps_parts

ROLES = {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1}  # indexes: c0 w1 w2 p3 e4


def node(id: str, free: int, slots: int | None = None) -> NodeCapacity:
    return NodeCapacity(id=id, address=f"10.0.0.{id[-1]}", slots=slots or free, free_slots=free)


def ps_request(
    roles: dict[str, int] = ROLES,
    role_placement: dict[str, str] | None = None,
    policy: str = "pack",
    job_id: int = 1,
) -> GangRequest:
    return GangRequest(
        job_id, sum(roles.values()), policy=policy, parts=ps_parts(roles, role_placement)
    )


def nodes_of(result_placements: list) -> list[str]:  # type: ignore[type-arg]
    return [p.node_id for p in result_placements]


def test_parts_of_a_ps_gang() -> None:
    assert ps_parts(ROLES) == (GangPart((0, 4, 1, 2, 3), together=2),)
    assert ps_parts(ROLES, {"ps": "separate"}) == (
        GangPart((0, 4, 1, 2), together=2),
        GangPart((3,), separate=True),
    )
    assert ps_parts(ROLES, {"chief": "separate", "ps": "separate"}) == (
        GangPart((0, 4), together=2, separate=True),
        GangPart((1, 2)),
        GangPart((3,), separate=True),
    )
    assert ps_parts({"chief": 1, "worker": 1, "ps": 1}) == (GangPart((0, 1, 2), together=1),)


def test_evaluator_lands_on_the_chiefs_node_when_the_gang_is_split() -> None:
    # 3 + 2 free: the gang of 5 spans both nodes; chief (0) and evaluator (4) share one.
    result = place([ps_request()], [node("n1", 2), node("n2", 3)])
    where = nodes_of(result.assignments[1])
    assert where[0] == where[4]
    assert sorted(where) == ["n1", "n1", "n2", "n2", "n2"]


def test_evaluator_follows_the_chief_under_spread() -> None:
    result = place(
        [ps_request(policy="spread")],
        [node("n1", 2), node("n2", 2), node("n3", 2), node("n4", 2), node("n5", 2)],
    )
    where = nodes_of(result.assignments[1])
    assert where[0] == where[4]
    assert len(set(where)) == 4  # the rest spread one per node


def test_no_node_with_room_for_chief_and_evaluator_waits() -> None:
    result = place([ps_request()], [node(f"n{i}", 1) for i in range(1, 6)])
    assert 1 not in result.assignments
    assert 1 in result.waiting


def test_separate_ps_avoids_the_chiefs_and_workers_nodes() -> None:
    result = place([ps_request(role_placement={"ps": "separate"})], [node("n1", 8), node("n2", 1)])
    where = nodes_of(result.assignments[1])
    assert where[3] == "n2" and set(where[:3] + where[4:]) == {"n1"}


def test_separate_ps_that_cannot_be_apart_is_unschedulable_not_blocking() -> None:
    # One node only: the ps can never be apart. The job must not hold the node.
    result = place(
        [ps_request(role_placement={"ps": "separate"}), GangRequest(2, 2, seq=2)], [node("n1", 8)]
    )
    assert result.waiting[1].startswith("unschedulable")
    assert 2 in result.assignments


def test_separate_chief_keeps_workers_and_ps_off_its_node() -> None:
    result = place(
        [ps_request(role_placement={"chief": "separate"})], [node("n1", 8), node("n2", 8)]
    )
    where = nodes_of(result.assignments[1])
    assert where[0] == where[4]
    assert where[0] not in where[1:4]


def test_choose_parts_gives_the_pool_back_unchanged() -> None:
    pool = Pool({"n1": 4, "n2": 2})
    before = (dict(pool.free), pool.units, pool.top)
    assert choose_parts(pool, ps_parts(ROLES, {"ps": "separate"}), 1, False) is not None
    assert choose_parts(pool, ps_parts({"chief": 1, "worker": 9, "ps": 1}), 1, False) is None
    assert (dict(pool.free), pool.units, pool.top) == before


def test_a_failed_part_takes_nothing() -> None:
    # Chief+evaluator+workers fit on n1, the separate ps finds no free node: nothing is
    # placed, and the gang waits (holding what it could use, as any blocked gang).
    result = place(
        [ps_request(role_placement={"ps": "separate"})],
        [node("n1", 5, slots=8), node("n2", 0, slots=1)],
    )
    assert result.assignments == {}
    assert result.waiting[1].startswith("needs 5 CPU slots")


def test_a_separate_chief_under_spread_takes_the_node_that_fits_it() -> None:
    # The chief and evaluator must share a node apart from the 4 others: under spread
    # the 2-slot node is theirs, leaving the 8-slot node to the workers and ps.
    roles = {"chief": 1, "worker": 3, "ps": 1, "evaluator": 1}
    result = place(
        [ps_request(roles, {"chief": "separate"}, policy="spread")], [node("a", 8), node("b", 2)]
    )
    assert 1 in result.assignments, result.waiting
    where = nodes_of(result.assignments[1])
    assert where[0] == where[5] == "b"
    assert set(where[1:5]) == {"a"}
