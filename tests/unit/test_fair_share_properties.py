"""Property tests of fair sharing and running quotas in the pure placer: projects of equal
priority take turns, none exceeds its quota, priority still comes first."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from services.cluster.fair_share import ProjectState
from services.cluster.placement import GangRequest, NodeCapacity, PlacementResult, place
from tests.unit.test_placement_properties import clusters


def _cpu_nodes(slots: list[int], used: Counter[str]) -> list[NodeCapacity]:
    return [
        NodeCapacity(id=f"n{i}", address=f"10.0.0.{i}", slots=s, free_slots=s - used[f"n{i}"])
        for i, s in enumerate(slots)
    ]


@settings(max_examples=200, deadline=None)
@given(
    gang=st.integers(1, 3),
    slots=st.lists(st.integers(0, 6), min_size=1, max_size=4),
    finishes=st.lists(st.lists(st.booleans(), max_size=12), min_size=1, max_size=12),
)
def test_two_projects_of_equal_priority_stay_within_one_gang_of_each_other(
    gang: int, slots: list[int], finishes: list[list[bool]]
) -> None:
    """Project 0 queued 30 gangs before project 1 queued its 30: pass after pass, as
    random gangs end, their running replicas differ by at most one gang while both
    still wait (submission order alone would run project 0's thirty first)."""
    queue = [GangRequest(job_id=i, replicas=gang, seq=i, project=0) for i in range(30)] + [
        GangRequest(job_id=30 + i, replicas=gang, seq=30 + i, project=1) for i in range(30)
    ]
    running: dict[int, GangRequest] = {}
    placed_on: dict[int, Counter[str]] = {}
    for ending in finishes:
        used: Counter[str] = sum(placed_on.values(), Counter())
        held: Counter[int] = Counter()
        for request in running.values():
            held[request.project] += request.replicas
        projects = {p: ProjectState(replicas=held[p], cpu_slots=held[p]) for p in (0, 1)}
        result = place(queue, _cpu_nodes(slots, used), projects)
        for job_id, placements in result.assignments.items():
            request = next(r for r in queue if r.job_id == job_id)
            running[job_id] = request
            placed_on[job_id] = Counter(p.node_id for p in placements)
            held[request.project] += request.replicas
        queue = [r for r in queue if r.job_id not in result.assignments]
        if {r.project for r in queue} == {0, 1}:
            assert abs(held[0] - held[1]) <= gang, (held, result.waiting)
        for job_id, ends in zip(list(running), ending, strict=False):
            if ends:
                del running[job_id], placed_on[job_id]


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(1, 4), st.integers(0, 20), st.integers(0, 12))
def test_a_project_with_nothing_running_goes_before_a_busy_projects_older_jobs(
    nodes: list[NodeCapacity], replicas: int, stream: int, busy: int
) -> None:
    """Project 0 runs `busy` replicas and has a stream of older jobs of the same shape
    queued; project 1's single, newest job is placed whenever it fits at all."""
    queue = [GangRequest(job_id=i, replicas=replicas, seq=i, project=0) for i in range(stream)]
    late = GangRequest(job_id=99, replicas=replicas, seq=99, project=1)
    projects = {0: ProjectState(replicas=busy, cpu_slots=busy), 1: ProjectState()}
    result = place([*queue, late], nodes, projects)
    fits = sum(n.free_slots for n in nodes) >= replicas
    if busy:
        assert (late.job_id in result.assignments) == fits
    if not busy and 0 in result.assignments and sum(n.slots for n in nodes):
        # Equal shares: the older job goes first, then the late one, whose project
        # now holds less.
        assert result.order[:2] == [0, 99]


@st.composite
def quota_cases(draw: st.DrawFn) -> tuple[list[GangRequest], dict[int, ProjectState]]:
    projects = {}
    for project in range(3):
        max_replicas = draw(st.none() | st.integers(0, 8))
        max_gpus = draw(st.none() | st.integers(0, 8))
        # Held replicas: `cpu` of them without GPUs, `gpus` with one GPU each; the pass
        # starts within the quota.
        cpu, gpus = draw(st.integers(0, 6)), draw(st.integers(0, 6))
        if max_gpus is not None:
            gpus = min(gpus, max_gpus)
        if max_replicas is not None:
            gpus = min(gpus, max_replicas)
            cpu = min(cpu, max_replicas - gpus)
        projects[project] = ProjectState(
            replicas=cpu + gpus,
            cpu_slots=cpu,
            gpus=gpus,
            max_replicas=max_replicas,
            max_gpus=max_gpus,
        )
    queue = [
        GangRequest(
            job_id=i,
            replicas=draw(st.integers(1, 4)),
            gpus_per_replica=draw(st.sampled_from([0, 0, 1, 2])),
            priority=draw(st.integers(0, 1)),
            seq=i,
            project=draw(st.integers(0, 2)),
        )
        for i in range(draw(st.integers(0, 14)))
    ]
    return queue, projects


@settings(max_examples=400, deadline=None)
@given(clusters(), quota_cases())
def test_a_project_never_exceeds_its_running_quotas(
    nodes: list[NodeCapacity], case: tuple[list[GangRequest], dict[int, ProjectState]]
) -> None:
    queue, projects = case
    result = place(queue, nodes, projects)
    for project, state in projects.items():
        placed = [r for r in queue if r.project == project and r.job_id in result.assignments]
        replicas = state.replicas + sum(r.replicas for r in placed)
        gpus = state.gpus + sum(r.replicas * r.gpus_per_replica for r in placed)
        if state.max_replicas is not None:
            assert replicas <= state.max_replicas
        if state.max_gpus is not None:
            assert gpus <= state.max_gpus
    for request in queue:
        reason = result.waiting.get(request.job_id, "")
        if reason.startswith("project quota:"):
            assert " of " in reason and reason.endswith(("running replicas in use", "GPUs in use"))


def _without_quota_waits(queue: list[GangRequest], result: PlacementResult) -> list[GangRequest]:
    return [r for r in queue if not result.waiting.get(r.job_id, "").startswith("project quota:")]


@settings(max_examples=400, deadline=None)
@given(clusters(), quota_cases())
def test_a_job_waiting_on_its_quota_holds_nothing_back(
    nodes: list[NodeCapacity], case: tuple[list[GangRequest], dict[int, ProjectState]]
) -> None:
    """The same placements as if the jobs waiting on their quotas were not queued at all."""
    queue, projects = case
    result = place(queue, nodes, projects)
    again = place(_without_quota_waits(queue, result), nodes, projects)
    assert again.assignments == result.assignments


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(1, 3), st.integers(0, 30))
def test_priority_comes_before_any_share(
    nodes: list[NodeCapacity], replicas: int, busy: int
) -> None:
    """A project holding much of the cluster still gets its urgent job placed first."""
    idle = [GangRequest(job_id=i, replicas=replicas, seq=i, project=1) for i in range(5)]
    urgent = GangRequest(job_id=9, replicas=replicas, priority=1, seq=9, project=0)
    projects = {0: ProjectState(replicas=busy, cpu_slots=busy), 1: ProjectState()}
    result = place([*idle, urgent], nodes, projects)
    assert result.order[0] == urgent.job_id
    if sum(n.free_slots for n in nodes) >= replicas:
        assert urgent.job_id in result.assignments
