"""DRA placement with the extender: it scores the slots the allocator's first fit takes, and its one-node answer
packs the slots as the extender profile's MostAllocated does."""

from __future__ import annotations

import random
from pathlib import Path

from agent.extender.demand import ContainerDemand, PodDemand
from agent.extender.drascoring import DRA_ANSWER_LIMIT
from agent.extender.ranking import RANK_SCALE, best_ranked
from agent.extender.scoring import ScoreWeights, score_node
from bench.sim.dra import dra
from bench.sim.draextender import DraExtender, first_fit_score
from bench.sim.engine import SimNode, SimSlot
from bench.sim.grid import dra_extender_weight
from bench.sim.policies import EPOCH, PLATFORM, bitstream_name, published
from bench.sim.workload import Pod

CATALOG = {bitstream_name(b): PLATFORM for b in range(10)}
WEIGHTS = ScoreWeights()
#: Long after every last use in these tests: no slot's own recency counts.
LATER = EPOCH + 10_000.0


def node(name: str, contents: list[tuple[int | None, int | None, float]]) -> SimNode:
    return SimNode(name, [SimSlot(bitstream=b, holder=h, last_used=t) for b, h, t in contents])


def test_a_partial_hit_that_the_slice_lists_late_is_scored_as_the_overwrite_it_is() -> None:
    # Two slots of bitstream 7 wanted; one free slot holds 7 but was used last, so the `any` alternative takes
    # the empty slot and then the least recently used one (bitstream 3), not the copy of 7.
    state = published(node("n1", [(7, None, 50.0), (None, None, 0.0), (3, None, 10.0)]), CATALOG)
    assert first_fit_score(state, bitstream_name(7), 2, WEIGHTS, LATER, {}) == 7  # (empty 7 + overwrite 7) / 2
    demand = PodDemand.of("p", [ContainerDemand("main", 2, bitstream_name(7))])
    assert score_node(demand, state, WEIGHTS, LATER) == 9  # the device-plugin score counts the copy: (10 + 7) / 2


def test_a_partial_hit_the_slice_lists_first_counts_as_loaded_and_valued_content_costs() -> None:
    copy_first = published(node("n1", [(7, None, 5.0), (None, None, 0.0), (3, None, 10.0)]), CATALOG)
    assert first_fit_score(copy_first, bitstream_name(7), 2, WEIGHTS, LATER, {}) == 9  # (empty 7 + loaded 10) / 2
    full = published(node("n2", [(3, None, 5.0), (4, None, 10.0)]), CATALOG)
    # The first slot in slice order is overwritten, whatever the other one is worth: content the cluster wants
    # (keep 1, half of a slot's value) costs 7 - 6 * 0.5 = 4, content nobody wants 7: (4 + 7) / 2 rounds to 6.
    assert first_fit_score(full, bitstream_name(7), 2, WEIGHTS, LATER, {bitstream_name(3): 1.0}) == 6
    assert first_fit_score(full, bitstream_name(7), 1, WEIGHTS, LATER, {bitstream_name(3): 1.0}) == 4
    assert first_fit_score(full, bitstream_name(7), 1, WEIGHTS, LATER, {bitstream_name(4): 1.0}) == 7
    both = published(node("n3", [(7, None, 5.0), (7, None, 9.0), (2, 1, 9.0)]), CATALOG)
    assert first_fit_score(both, bitstream_name(7), 2, WEIGHTS, LATER, {}) == 10  # `cached` fits
    assert first_fit_score(both, bitstream_name(7), 3, WEIGHTS, LATER, {}) == 0  # two free slots for three


def test_of_nodes_the_extender_scores_alike_the_dra_profile_takes_the_fullest() -> None:
    pod = Pod(0, 100.0, 5, 1, 10.0)

    def nodes() -> list[SimNode]:
        spare = node("spare", [(None, None, 0.0)] * 4)
        busy = node("busy", [(1, 8, 1.0), (2, 9, 1.0), (3, 10, 1.0), (None, None, 0.0)])
        recent = node("recent", [(4, None, 99.0), (4, 11, 99.0)])  # overwrites content used a second ago
        return [spare, busy, recent]

    with_extender = {
        dra(random.Random(seed), lru=True, extender=DraExtender(WEIGHTS, CATALOG), extender_weight=5)(
            nodes(), pod, 100.0
        )[0].name
        for seed in range(12)
    }
    alone = {dra(random.Random(seed), lru=True)(nodes(), pod, 100.0)[0].name for seed in range(12)}
    assert with_extender == {"busy"}  # both score `empty`; the answer lists the better packed one only
    assert alone == {"spare", "busy", "recent"}  # without the extender, ties go any way


def test_the_extender_steers_a_dra_pod_away_from_overwriting_recent_content() -> None:
    # Neither node holds bitstream 5; the slot the allocator would overwrite on n1 was used a second ago, on n2
    # an hour and more ago.
    pod = Pod(0, 5000.0, 5, 1, 10.0)
    extender = DraExtender(WEIGHTS, CATALOG)
    recent = node("n1", [(0, None, 4999.0), (0, 3, 4999.0)])
    stale = node("n2", [(9, None, 1.0), (9, 4, 1.0)])
    answer = extender.answer([recent, stale], pod, ["n1", "n2"], 5000.0)
    assert answer == {"n2": 6}  # 7 against 7 - 6 (recency: just used): n1 is the floor, left out
    for seed in range(8):
        place = dra(random.Random(seed), lru=True, extender=DraExtender(WEIGHTS, CATALOG), extender_weight=5)
        assert place([recent, stale], pod, 5000.0) == (stale, [0])


def test_the_dra_profile_takes_its_extender_weight_from_its_own_entry_else_the_extender_profile(
    tmp_path: Path,
) -> None:
    (tmp_path / "dra-mode").mkdir()
    extender_profile = tmp_path / "scheduler-config.yaml"
    extender_profile.write_text(
        "profiles: [{schedulerName: fpga-scheduler}]\nextenders: [{urlPrefix: 'http://x', weight: 7}]\n"
    )
    dra_profile = tmp_path / "dra-mode" / "scheduler-config.yaml"
    dra_profile.write_text("profiles: [{schedulerName: fpga-scheduler}]\n")
    assert dra_extender_weight(extender_profile) == 7
    dra_profile.write_text(
        "profiles: [{schedulerName: fpga-scheduler}]\nextenders: [{urlPrefix: 'http://x', weight: 3}]\n"
    )
    assert dra_extender_weight(extender_profile) == 3


def test_the_answer_through_the_score_board_equals_scoring_every_name_by_the_allocators_slots() -> None:
    # The simulation asks the extender's own scorer; its answer must be what
    # scoring each node by the slots the allocator takes gives, shifted to the floor, the best by score and packing.
    rng = random.Random(5)
    for round_ in range(30):
        now = 4000.0 + 50.0 * round_
        nodes = [
            node(
                f"n{i}",
                [
                    (rng.choice([None, 0, 1, 2, 3]), rng.choice([None, None, 9]), rng.uniform(0.0, now))
                    for _ in range(rng.choice([2, 4, 8]))
                ],
            )
            for i in range(rng.randint(2, 9))
        ]
        pod = Pod(round_, now, rng.randrange(4), rng.choice([1, 1, 2]), 10.0)
        names = [n.name for n in nodes if n.free_count >= pod.slots]
        if len(names) < 2:
            continue
        extender = DraExtender(WEIGHTS, CATALOG)
        answer = extender.answer(nodes, pod, names, now)
        states = {n.name: published(n, CATALOG) for n in nodes}
        ranks = [
            first_fit_score(states[name], bitstream_name(pod.bitstream), pod.slots, WEIGHTS, EPOCH + now, {})
            * RANK_SCALE
            + states[name].packing(pod.slots)
            for name in names
        ]
        assert answer == dict(best_ranked(names, ranks, DRA_ANSWER_LIMIT, pack_ties=True)), round_
