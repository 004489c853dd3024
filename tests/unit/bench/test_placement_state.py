"""The truth bench/placement_scale.py measures against: hits counted only where a free copy existed."""

from __future__ import annotations

from agent.slots.published import parse_state, state_object
from bench.placement_state import ClusterState, Slot, wanted


def state() -> ClusterState:
    nodes = {
        "n0": [Slot("bs-001", 100), Slot(None, 50), Slot("bs-002", 10), Slot("bs-001", 5, free=False)],
        "n1": [Slot("bs-003", 30), Slot("bs-002", 20), Slot("bs-003", 40), Slot("bs-004", 60)],
    }
    made = ClusterState(nodes, bitstreams=5)
    made.count_copies()
    made.initial = {(n, s.bitstream) for n, slots in nodes.items() for s in slots if s.bitstream is not None}
    return made


def test_a_pod_on_a_node_holding_its_bitstream_free_is_a_hit_and_takes_that_slot() -> None:
    cluster = state()
    cluster.take("n0", "bs-001", 200)
    assert (cluster.tally.pods, cluster.tally.possible, cluster.tally.hits) == (1, 1, 1)
    assert not cluster.nodes["n0"][0].free
    assert cluster.copies["bs-001"] == 0
    cluster.take("n0", "bs-001", 201)  # no free copy left anywhere: not counted against the search
    assert (cluster.tally.possible, cluster.tally.hits) == (1, 1)
    assert cluster.nodes["n0"][1].bitstream == "bs-001"  # the empty slot was programmed


def test_a_miss_overwrites_the_least_recently_used_and_counts_a_copy_taken_before() -> None:
    cluster = state()
    cluster.take("n1", "bs-002", 300)  # hit: n1's copy
    cluster.take("n1", "bs-002", 301)  # n0 still holds one free: a miss, on a node whose copy was taken
    assert (cluster.tally.possible, cluster.tally.hits, cluster.tally.taken_before) == (2, 1, 1)
    assert cluster.nodes["n1"][0].bitstream == "bs-002"  # bs-003 last used at 30: the oldest free slot


def test_published_state_and_slice_order_follow_the_agent() -> None:
    cluster = state()
    published = parse_state(state_object("n0", "fpga-slot", cluster.spec("n0")))  # what the extender reads
    assert [s["free"] for s in published.slots] == [True, True, True, False]
    assert [s["last_used"] for s in published.slots] == [100, 50, 10, 5]
    devices = cluster.slice_body("n0")["spec"]["devices"]
    assert [d["name"] for d in devices] == ["card0-port1", "card0-port3", "card0-port2", "card0-port0"]


def test_pods_ask_by_the_same_law_every_run() -> None:
    assert wanted(500, 50, 1.0, seed=3) == wanted(500, 50, 1.0, seed=3)
    asked = wanted(5000, 50, 1.0, seed=3)
    assert asked.count("bs-000") > asked.count("bs-049") * 10
