"""The scheduler's feasible-node search as simulated, and the queue that holds no pod behind one that waits."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from bench.sim.engine import SimNode, SimSlot, programmings, retry, simulate
from bench.sim.sampling import Sampler, nodes_to_find
from bench.sim.workload import Pod, Shape, Workload, make_workload


@pytest.mark.parametrize(
    ("total", "percentage", "expected"),
    [
        pytest.param(50, None, 50, id="under-100-every-node"),
        pytest.param(99, 10, 99, id="under-100-even-when-configured"),
        pytest.param(120, None, 100, id="adaptive-50pct-but-at-least-100"),
        pytest.param(1000, None, 420, id="1000-nodes-42pct"),
        pytest.param(2000, None, 680, id="2000-nodes-34pct"),
        pytest.param(5000, None, 500, id="5000-nodes-10pct"),
        pytest.param(6000, None, 300, id="floor-5pct"),
        pytest.param(5000, 30, 1500, id="profile-percentage"),
        pytest.param(5000, 1, 100, id="configured-but-at-least-100"),
        pytest.param(5000, 100, 5000, id="every-node"),
    ],
)
def test_nodes_to_find_follows_kube_scheduler(total: int, percentage: int | None, expected: int) -> None:
    assert nodes_to_find(total, percentage) == expected


def _nodes(count: int, full: frozenset[int] | set[int] = frozenset()) -> list[SimNode]:
    return [SimNode(f"n{i}", [SimSlot(holder=1 if i in full else None)]) for i in range(count)]


def test_the_search_starts_where_the_last_one_ended_and_counts_nodes_that_do_not_fit() -> None:
    nodes = _nodes(300, full={1, 3})
    sampler = Sampler(percentage=None)  # 300 nodes: 50 - 2 = 48 % -> 144 nodes
    first = sampler.feasible(nodes, 1)
    assert len(first) == 144
    assert [n.name for n in first[:3]] == ["n0", "n2", "n4"]  # n1 and n3 are examined, do not fit
    assert sampler.next_start == 146  # 144 found + 2 that did not fit
    second = sampler.feasible(nodes, 1)
    assert [n.name for n in second[:2]] == ["n146", "n147"]
    assert second[-1].name == "n289"
    third = sampler.feasible(nodes, 1)  # wraps around the end of the list
    assert [n.name for n in third[:11]] == [f"n{i}" for i in range(290, 300)] + ["n0"]


def test_a_search_that_finds_too_few_examines_every_node_once() -> None:
    nodes = _nodes(200, full=set(range(150)))
    sampler = Sampler()
    sampler.next_start = 170
    found = sampler.feasible(nodes, 1)
    assert len(found) == 50
    assert sampler.next_start == 170  # examined all 200: back where it started


def test_a_waiting_pod_holds_back_no_pod_that_fits() -> None:
    # One node of 2 slots. Pod 0 holds one slot for 10 s; pod 1 wants 2 slots and must wait until then;
    # pod 2 (one slot) arrives meanwhile and fits at once: kube-scheduler does not hold it behind pod 1.
    pods = [Pod(0, 0.0, 0, 1, 10.0), Pod(1, 1.0, 0, 2, 5.0), Pod(2, 2.0, 0, 1, 1.0)]
    workload = Workload(Shape(nodes=1, slots=(2,), pods=3), pods, [0.0], [[]], [[]], [(0.0, [1.0])])

    def place(nodes: list[SimNode], pod: Pod, now: float) -> tuple[SimNode, list[int]] | None:
        free = nodes[0].free()
        return (nodes[0], free[: pod.slots]) if len(free) >= pod.slots else None

    result = simulate(workload, place)
    assert sorted(result.delays) == [0.0, 0.0, 9.0]  # pods 0 and 2 at once; pod 1 at t=10


def test_retry_skips_pods_asking_as_much_as_one_that_just_failed() -> None:
    tried: list[int] = []

    def start(pod: Pod, now: float) -> bool:
        tried.append(pod.index)
        return pod.slots == 1 and pod.index == 3

    waiting = [Pod(0, 0.0, 0, 2, 1.0), Pod(1, 0.0, 0, 3, 1.0), Pod(2, 0.0, 0, 2, 1.0), Pod(3, 0.0, 0, 1, 1.0)]
    still = retry(waiting, start, 0.0)
    assert tried == [0, 3]  # 1 and 2 ask at least as many slots as pod 0, which found no node
    assert [p.index for p in still] == [0, 1, 2]


def _walk(nodes: list[SimNode], need: int, start: int, wanted: int) -> tuple[list[SimNode], int]:
    """The search node by node, as kube-scheduler's loop runs it: (found, next start)."""
    found: list[SimNode] = []
    examined = 0
    while examined < len(nodes) and len(found) < wanted:
        node = nodes[(start + examined) % len(nodes)]
        examined += 1
        if node.free_count >= need:
            found.append(node)
    return found, (start + examined) % len(nodes)


@pytest.mark.parametrize("percentage", [None, 1, 30, 100])
def test_the_search_in_runs_finds_and_stops_as_a_walk_node_by_node(percentage: int | None) -> None:
    rng = random.Random(percentage or 0)
    for _ in range(40):
        total = rng.choice([1, 7, 99, 100, 101, 250, 1200])
        busy = rng.random()  # from nearly every node fitting to nearly none
        nodes = [
            SimNode(f"n{i}", [SimSlot(holder=1 if rng.random() < busy else None) for _ in range(rng.randint(1, 4))])
            for i in range(total)
        ]
        sampler = Sampler(percentage)
        sampler.next_start = start = rng.randrange(total)
        for need in (1, 2, 3):  # successive pods: each search starts where the last one ended
            expected, after = _walk(nodes, need, start, nodes_to_find(total, percentage))
            assert sampler.feasible(nodes, need) == expected
            assert sampler.next_start == after
            start = after


def test_a_node_keeps_its_free_slots_and_free_copies_counted_through_a_simulation() -> None:
    shape = Shape(nodes=6, slots=(2, 4, 8), bitstreams=5, multi_share=0.4, max_slots=4, load=0.9, pods=600)
    seen = {"checks": 0}

    def place(nodes: list[SimNode], pod: Pod, now: float) -> tuple[SimNode, list[int]] | None:
        for node in nodes:  # what the engine keeps on every change, against the slots themselves
            assert node.free_count == len(node.free())
            assert node.free_held == Counter(
                s.bitstream for s in node.slots if s.holder is None and s.bitstream is not None
            )
            seen["checks"] += 1
        fitting = [n for n in nodes if n.free_count >= pod.slots]
        if not fitting:
            return None
        node = fitting[pod.index % len(fitting)]
        return node, node.free()[: pod.slots]

    simulate(make_workload(shape, seed=4), place)
    assert seen["checks"] >= shape.pods * shape.nodes


def test_programmings_are_what_each_fitting_node_lacks_of_free_copies() -> None:
    nodes = [
        SimNode("two-copies", [SimSlot(bitstream=3), SimSlot(bitstream=3), SimSlot(bitstream=1)]),
        SimNode("one-copy-busy", [SimSlot(bitstream=3, holder=7), SimSlot(bitstream=3), SimSlot()]),
        SimNode("too-small", [SimSlot(bitstream=3)]),
    ]
    found, least = programmings(nodes, Pod(0, 0.0, 3, 2, 1.0))
    assert [(node.name, count) for node, count in found] == [("two-copies", 0), ("one-copy-busy", 1)]
    assert least == 0
    assert programmings(nodes[2:], Pod(1, 0.0, 3, 2, 1.0)) == ([], 2)  # fits nowhere
