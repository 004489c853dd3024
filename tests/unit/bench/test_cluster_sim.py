"""The cluster simulation: workloads as specified, an engine that keeps slots straight, a sound reference."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from agent.extender.scoring import ScoreWeights
from bench.sim.cachegap import a0, belady, cache_gap
from bench.sim.dra import dra
from bench.sim.engine import SimNode, SimSlot, simulate
from bench.sim.grid import (
    C2,
    DRA,
    DRA_ALONE,
    GRID,
    INFORMED,
    ORACLE,
    A,
    B,
    C,
    grid_tables,
    profile_settings,
    run_point,
)
from bench.sim.informed import EXACT, TOLD, WINDOWS, ToldFacts, exact
from bench.sim.policies import EPOCH, PLATFORM, WithExtender, bitstream_name, fit_scores, ours
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
    for policy in (A, B, C, C2, DRA, DRA_ALONE, INFORMED, ORACLE):
        result = point.results[policy]
        assert len(result.delays) == SMALL.pods  # every pod started once (the engine asserts no slot is given twice)
        assert point.rate(policy) >= bound
    assert point.rate(ORACLE) <= min(point.rate(p) for p in (A, B, C, C2, DRA, DRA_ALONE))
    assert point.informed_variant in (TOLD, *(f"{EXACT}, window {w:g}" for w in WINDOWS))
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
    assert "(e) DRA / (c): median" in table
    assert "(r) / oracle, what knowing the next arrivals is worth: median" in table
    assert "(c) / (r), what our estimate and scoring leave: median" in table
    assert "oracle beaten by an online policy at:" in table


def test_the_cold_miss_bound_counts_peak_concurrency() -> None:
    pods = [Pod(0, 0.0, 0, 1, 10.0), Pod(1, 5.0, 0, 2, 10.0), Pod(2, 12.0, 0, 1, 1.0), Pod(3, 20.0, 1, 1, 1.0)]
    workload = Workload(
        Shape(pods=4), pods, [10.0, 10.0], [[0.0, 5.0, 12.0], [20.0]], [[1, 2, 1], [1]], [(0.0, [0.5, 0.5])]
    )
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
    assert policy.facts.share(bitstream_name(workload.pods[-1].bitstream)) > 0  # the pods were counted


def test_the_popularity_law_is_recorded_as_dealt_at_every_drift() -> None:
    shape = Shape(nodes=20, bitstreams=30, zipf=1.4, pods=8000, drift_s=1000.0)
    workload = make_workload(shape, seed=2)
    starts = [start for start, _ in workload.popularity]
    assert starts == [1000.0 * k for k in range(len(starts))]
    assert starts[-1] <= workload.pods[-1].arrival < starts[-1] + 1000.0
    for start, chances in workload.popularity:
        assert sum(chances) == pytest.approx(1.0)
        assert workload.chances(start + 500.0) is chances
        period = Counter(p.bitstream for p in workload.pods if start <= p.arrival < start + 1000.0)
        if period.total() >= 300:  # the most asked-for bitstream of a period is the law's most likely one
            assert period.most_common(1)[0][0] == max(range(30), key=chances.__getitem__)
    steady = make_workload(replace(shape, drift_s=0.0), seed=2)
    assert len(steady.popularity) == 1
    assert steady.chances(1e9)[0] == max(steady.chances(0.0))


def _node(name: str, contents: list[tuple[int | None, int | None, float]]) -> SimNode:
    return SimNode(name, [SimSlot(bitstream=b, holder=h, last_used=t) for b, h, t in contents])


def told_workload(chances: dict[int, float]) -> tuple[Workload, list[Pod]]:
    """Ten bitstreams with these chances per arrival (the rest 0), and one pod asking one slot of bitstream 3."""
    pod = Pod(0, 0.0, 3, 1, 1.0)
    uses = [[pod.arrival] if b == pod.bitstream else [] for b in range(10)]
    use_slots = [[pod.slots] if b == pod.bitstream else [] for b in range(10)]
    law = [chances.get(b, 0.0) for b in range(10)]
    return Workload(Shape(pods=1, bitstreams=10), [pod], [10.0] * 10, uses, use_slots, [(0.0, law)]), [pod]


def test_the_told_placement_takes_a_free_copy_then_overwrites_what_the_law_values_least() -> None:
    workload, pods = told_workload({1: 0.6, 2: 0.3, 3: 0.1})
    place = exact(workload, random.Random(1))
    last_popular = _node("a", [(1, None, 9.0), (7, 5, 1.0)])  # the only free copy of bitstream 1
    spare = _node("b", [(2, None, 1.0), (2, None, 2.0)])  # two free copies of bitstream 2
    holds_it = _node("c", [(3, None, 0.0), (None, 6, 0.0)])
    assert place([last_popular, spare, holds_it], pods[0], 10.0) == (holds_it, [0])
    # Without a free copy: a spare copy of 2 is worth less than the last copy of 1, even though 1 is older.
    assert place([last_popular, spare], pods[0], 10.0) == (spare, [0])
    # Content the law never asks for goes before both; an empty slot before any content.
    unwanted = _node("d", [(8, None, 9.0), (None, 7, 0.0)])
    assert place([last_popular, spare, unwanted], pods[0], 10.0) == (unwanted, [0])
    assert place([_node("e", [(8, None, 9.0), (None, None, 0.0)])], pods[0], 10.0)[1] == [1]
    # A two-slot pod fits only where two slots are free.
    assert place([last_popular, spare], Pod(1, 0.0, 3, 2, 1.0), 10.0) == (spare, [0, 1])


def test_the_told_facts_take_the_share_from_the_law_and_value_copies_as_the_extender_does() -> None:
    workload = make_workload(Shape(nodes=4, bitstreams=5, zipf=1.0, pods=50, drift_s=100.0), seed=1)
    facts = ToldFacts(workload)
    for start, chances in workload.popularity[:3]:
        facts.keep_values([], EPOCH + start + 1.0)
        assert [facts.share(bitstream_name(b)) for b in range(5)] == chances


def test_a0_and_belady_miss_as_counted_by_hand() -> None:
    asked = [0, 1, 2, 1, 2, 1, 2, 0]
    chances = [0.5, 0.3, 0.2]
    # A0, two entries: 0 and 1 cold; then 2 and 1 take turns evicting each other (0 is the most likely, it stays);
    # the last 0 hits. Belady: 0 and 1 cold; 2 evicts 0 (asked again last); 1, 2, 1, 2 hit; 0 misses again.
    assert a0(asked, chances, 2) == 7
    assert belady(asked, 2) == 4
    assert a0(asked, chances, 3) == belady(asked, 3) == 3  # everything fits: only the cold misses


def test_belady_never_misses_more_than_a0_and_the_gap_grows_with_a_flat_law() -> None:
    rng = random.Random(4)
    for _ in range(20):
        asked = [rng.randrange(12) for _ in range(300)]
        chances = [rng.random() for _ in range(12)]
        assert belady(asked, 4) <= a0(asked, chances, 4)
    flat = cache_gap(Shape(nodes=100, slots=(4,), bitstreams=300, zipf=0.6, load=0.7), seed=1, requests=20_000)
    steep = cache_gap(Shape(nodes=100, slots=(4,), bitstreams=300, zipf=1.4, load=0.7), seed=1, requests=20_000)
    assert flat.entries == steep.entries == 120
    assert flat.ratio > steep.ratio > 1.0


def test_the_told_window_decides_between_a_spare_popular_copy_and_the_last_copy_of_a_rare_one() -> None:
    workload, pods = told_workload({1: 0.3, 2: 0.05, 3: 0.1})
    spare = _node("a", [(1, None, 1.0), (7, 5, 1.0)])  # one of two free copies of the popular bitstream 1
    rare = _node("b", [(2, None, 1.0), (7, 6, 1.0)])  # the only free copy of the rare bitstream 2
    other = _node("c", [(1, None, 1.0), (7, 7, 1.0), (7, 8, 1.0)])  # the other free copy of 1 (3 free slots in all)
    # A few pods ahead (0.25 x 3): two asking for 1 (p ~ 0.02) are less likely than one asking for 2 (p ~ 0.04).
    assert exact(workload, random.Random(1), window=0.25)([spare, rare, other], pods[0], 10.0)[0] in (spare, other)
    # Many pods ahead (4 x 3): two asking for 1 (p ~ 0.87) are likelier than one asking for 2 (p ~ 0.45).
    assert exact(workload, random.Random(1), window=4.0)([spare, rare, other], pods[0], 10.0)[0] is rare
