"""The slices the DRA benchmarks publish for a fake node are the agent's, with and without whole cards."""

from __future__ import annotations

from bench import dra_sched, dra_shapes


def test_a_node_offering_its_card_whole_publishes_a_card_device_and_a_counters_slice() -> None:
    plain = dra_sched.slice_bodies("fake-node-7")
    with_cards = dra_sched.slice_bodies("fake-node-7", cards=True)
    assert [s["metadata"]["name"] for s in plain] == ["fake-node-7-fpga.example.com"]
    assert [s["metadata"]["name"] for s in with_cards] == [
        "fake-node-7-fpga.example.com",
        "fake-node-7-fpga.example.com-counters",
    ]
    slots = [d["name"] for d in plain[0]["spec"]["devices"]]
    devices = {d["name"]: d for d in with_cards[0]["spec"]["devices"]}
    (card,) = set(devices) - set(slots)
    assert devices[card]["consumesCounters"][0]["counters"].keys() == set(slots)
    (counter_set,) = with_cards[1]["spec"]["sharedCounters"]
    assert counter_set["name"] == card
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in with_cards} == {2}
    assert plain[0]["spec"]["pool"]["resourceSliceCount"] == 1


def test_the_whole_card_form_runs_the_shipped_claim_with_the_card_class_published_too() -> None:
    shape = dra_shapes.SHAPES["shipped-cards"]
    assert shape.cards
    assert not dra_shapes.SHAPES["shipped"].cards
    assert shape.claim is dra_shapes.SHAPES["shipped"].claim
    assert {c["metadata"]["name"] for c in shape.classes()} == {"fpga-slot", "fpga-slot-cached", "fpga-card"}
