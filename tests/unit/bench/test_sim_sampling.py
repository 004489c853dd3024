"""The scheduler's feasible-node search as simulated, and the queue that holds no pod behind one that waits."""

from __future__ import annotations

import pytest

from bench.sim.engine import SimNode, SimSlot, retry, simulate
from bench.sim.sampling import Sampler, nodes_to_find
from bench.sim.workload import Pod, Shape, Workload


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
