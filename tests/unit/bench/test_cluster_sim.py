"""The cluster simulation: workloads as specified, an engine that keeps slots straight, a sound reference."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from agent.extender.scoring import ScoreWeights
from bench.sim.dra import dra
from bench.sim.engine import SimNode, SimSlot, simulate
from bench.sim.grid import C2, DRA, GRID, ORACLE, A, B, C, grid_tables, profile_settings, run_point
from bench.sim.policies import PLATFORM, WithExtender, bitstream_name, fit_scores, ours
from bench.sim.workload import Pod, Shape, Workload, cold_miss_bound, make_workload

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "daemonset" / "scheduler-config.yaml"
SMALL = Shape(nodes=12, slots=(2, 4), bitstreams=15, zipf=0.9, multi_share=0.3, max_slots=3, pods=600)


def test_the_workload_offers_the_load_asked_for() -> None:
    shape = Shape(nodes=50, slots=(4,), load=0.6, pods=20_000)
    workload = make_workload(shape, seed=3)
    span = workload.pods[-1].arrival
    busy = sum(p.slots * p.duration for p in workload.pods) / (span * shape.total_slots)
    assert busy == pytest.approx(0.6, rel=0.05)
    assert Counter(p.slots for p in workload.pods)[2] / shape.pods == pytest.approx(0.3, abs=0.02)


def test_bursts_arrive_together_and_ask_for_one_bitstream() -> None:
    workload = make_workload(replace(SMALL, burst=5.0, pods=3000), seed=1)
    batches: dict[float, list[int]] = {}
    for pod in workload.pods:
        batches.setdefault(pod.arrival, []).append(pod.bitstream)
    assert len(workload.pods) / len(batches) == pytest.approx(5.0, rel=0.15)
    assert all(len(set(b)) == 1 for b in batches.values())


def test_drift_deals_the_popularity_out_again() -> None:
    shape = Shape(nodes=20, bitstreams=30, zipf=1.4, pods=8000, drift_s=1000.0)
    workload = make_workload(shape, seed=2)
    top = {
        int(pod.arrival // 1000): Counter(
            p.bitstream for p in workload.pods if int(p.arrival // 1000) == int(pod.arrival // 1000)
        ).most_common(1)[0][0]
        for pod in workload.pods[::500]
    }
    assert len(set(top.values())) > 1  # the most asked-for bitstream changes between periods
    steady = make_workload(replace(shape, drift_s=0.0), seed=2)
    assert Counter(p.bitstream for p in steady.pods).most_common(1)[0][0] == 0


def test_mixed_node_sizes_are_cycled() -> None:
    assert Shape(nodes=5, slots=(2, 8)).node_sizes() == [2, 8, 2, 8, 2]
    assert Shape(nodes=5, slots=(2, 8)).total_slots == 22


def test_every_policy_beats_none_and_the_bound_holds() -> None:
    point = run_point(SMALL, seed=1, scheduler_config=CONFIG)
    bound = point.bound_rate
    for policy in (A, B, C, C2, DRA, ORACLE):
        result = point.results[policy]
        assert len(result.delays) == SMALL.pods  # every pod started once (the engine asserts no slot is given twice)
        assert point.rate(policy) >= bound
    assert point.rate(ORACLE) <= min(point.rate(p) for p in (A, B, C, C2, DRA))
    assert point.rate(C) < point.rate(A)


def test_the_extender_policy_reads_the_shipped_profile(tmp_path: Path) -> None:
    weight, packs = profile_settings(CONFIG)
    assert (weight, packs) == (5, True)
    spread = tmp_path / "spread.yaml"
    spread.write_text(CONFIG.read_text().replace("type: MostAllocated", "type: LeastAllocated"))
    assert profile_settings(spread) == (5, False)


def test_the_grid_covers_the_space_it_promises() -> None:
    assert len(GRID) >= 24
    sizes = {s for shape in GRID for s in shape.slots}
    assert {2, 4, 8} <= sizes
    assert any(len(shape.slots) > 1 for shape in GRID)
    assert min(s.nodes for s in GRID) <= 32
    assert max(s.nodes for s in GRID) >= 200
    assert min(s.bitstreams for s in GRID) <= 10
    assert max(s.bitstreams for s in GRID) >= 300
    assert min(s.zipf for s in GRID) <= 0.6
    assert max(s.zipf for s in GRID) >= 1.4
    assert min(s.load for s in GRID) <= 0.5
    assert max(s.load for s in GRID) >= 0.95
    assert min(s.multi_share for s in GRID) == 0.0
    assert max(s.multi_share for s in GRID) >= 0.5
    assert max(s.max_slots for s in GRID) == 4
    assert any(s.burst > 1 for s in GRID)
    assert any(s.drift_s for s in GRID)


def test_the_table_names_every_point_and_the_verdicts() -> None:
    point = run_point(replace(SMALL, pods=200), seed=1, scheduler_config=CONFIG)
    table = grid_tables([point, point])
    assert table.count(SMALL.describe()) == 2
    assert "(c) / oracle: median" in table
    assert "(e) DRA / oracle: median" in table
    assert "oracle beaten by an online policy at:" in table


def test_the_cold_miss_bound_counts_peak_concurrency() -> None:
    pods = [Pod(0, 0.0, 0, 1, 10.0), Pod(1, 5.0, 0, 2, 10.0), Pod(2, 12.0, 0, 1, 1.0), Pod(3, 20.0, 1, 1, 1.0)]
    workload = Workload(Shape(pods=4), pods, [10.0, 10.0], [[0.0, 5.0, 12.0], [20.0]], [[1, 2, 1], [1]])
    assert cold_miss_bound(workload) == 3 + 1  # bitstream 0 runs in 3 slots at once (5..10), bitstream 1 in one


def test_dra_placement_prefers_a_node_with_the_bitstream_free_and_then_overwrites_empty_then_lru() -> None:
    def node(name: str, contents: list[tuple[int | None, int | None, float]]) -> SimNode:
        return SimNode(name, [SimSlot(bitstream=b, holder=h, last_used=t) for b, h, t in contents])

    place = dra(random.Random(1), lru=True)
    holds_it = node("n1", [(7, None, 5.0), (3, None, 1.0)])
    held = node("n2", [(7, 99, 5.0), (None, None, 0.0)])  # has bitstream 7, but in use
    pod = Pod(0, 0.0, 7, 1, 10.0)
    assert place([held, holds_it], pod, 0.0) == (holds_it, [0])  # the first alternative fits only on n1
    other = Pod(1, 0.0, 5, 1, 10.0)
    empty_one = node("n3", [(4, None, 9.0), (None, None, 0.0), (2, None, 3.0)])
    assert place([empty_one], other, 0.0) == (empty_one, [1])  # the empty slot first
    full = node("n4", [(4, None, 9.0), (2, None, 3.0)])
    assert place([full], other, 0.0) == (full, [1])  # then the least recently used
    by_id = dra(random.Random(1))
    assert by_id([full], other, 0.0) == (full, [0])  # a slice by ID: the first free slot


@pytest.mark.parametrize(
    ("most_allocated", "expected"),
    [
        # a 2-slot pod: node sizes 2, 8, 8 with 2, 6 and 2 free slots; the pod's own slots count as in use
        pytest.param(True, {"n0": 100, "n1": 50, "n2": 100}, id="most-allocated"),
        pytest.param(False, {"n0": 0, "n1": 50, "n2": 0}, id="least-allocated"),
    ],
)
def test_fit_scores_count_the_pods_own_request(most_allocated: bool, expected: dict[str, int]) -> None:
    nodes = [
        SimNode("n0", [SimSlot(), SimSlot()]),
        SimNode("n1", [SimSlot(holder=1), SimSlot(holder=2), *[SimSlot() for _ in range(6)]]),
        SimNode("n2", [*[SimSlot(holder=3 + i) for i in range(6)], SimSlot(), SimSlot()]),
        SimNode("full", [SimSlot(holder=9), SimSlot()]),  # one free slot: the pod does not fit
    ]
    scored = fit_scores(nodes, Pod(0, 0.0, 0, 2, 1.0), most_allocated, random.Random(1))
    assert {node.name: int(score) for score, node in scored} == expected


def test_the_extender_policy_is_asked_through_the_score_board_with_every_changed_node() -> None:
    workload = make_workload(replace(SMALL, pods=300), seed=2)
    catalog = {bitstream_name(b): PLATFORM for b in range(SMALL.bitstreams)}
    policy = WithExtender(random.Random(1), ours, ScoreWeights(), 5, catalog, most_allocated=True)
    simulate(workload, policy)
    cache = policy.cache
    assert set(cache.nodes) == {f"node{n:03d}" for n in range(SMALL.nodes)}
    assert len(cache.changes) > SMALL.nodes  # every node once, then each one whose slots changed since
    assert policy.board.facts.share(bitstream_name(workload.pods[-1].bitstream)) > 0  # the pods were counted
