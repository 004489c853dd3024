"""Slot IDs as DRA device names (DNS labels)."""

from __future__ import annotations

import re

import pytest

from agent.dra.naming import NameClash, device_name, device_names, disambiguated_name
from agent.slots.model import make_slot_id

LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@pytest.mark.parametrize(
    ("card", "region", "expected"),
    [
        ("simcard0", "slot1", "simcard0-slot1"),
        ("0000:3b:00.0", "port0", "0000-3b-00-0-port0"),
        ("fpga0", "region1.static", "fpga0-region1-static"),
    ],
    ids=["sim", "dfl-pci-address", "dotted-region"],
)
def test_a_slot_id_becomes_a_dns_label(card: str, region: str, expected: str) -> None:
    name = device_name(make_slot_id(card, region))
    assert name == expected
    assert LABEL.fullmatch(name)


@pytest.mark.parametrize(
    "order",
    [["0000-3b-00.0-p1", "0000-3b-00-0-p1", "c0-p0"], ["c0-p0", "0000-3b-00-0-p1", "0000-3b-00.0-p1"]],
    ids=["dotted-first", "label-first"],
)
def test_two_slots_with_one_plain_name_both_get_a_device_name_whatever_the_order(order: list[str]) -> None:
    names, clashes = device_names(order)
    dotted = disambiguated_name("0000-3b-00.0-p1")
    assert names == {"0000-3b-00-0-p1": "0000-3b-00-0-p1", dotted: "0000-3b-00.0-p1", "c0-p0": "c0-p0"}
    assert clashes == [NameClash("0000-3b-00-0-p1", "0000-3b-00-0-p1", "0000-3b-00.0-p1", dotted)]
    assert dotted.startswith("0000-3b-00-0-p1-")
    assert all(LABEL.fullmatch(name) for name in names)


def test_among_slots_none_of_whose_ids_is_the_name_the_first_by_id_keeps_it_and_the_others_differ() -> None:
    names, clashes = device_names(["a.b.c", "a.b-c", "a-b.c"])
    assert names == {"a-b-c": "a-b.c", disambiguated_name("a.b-c"): "a.b-c", disambiguated_name("a.b.c"): "a.b.c"}
    assert [(c.kept, c.renamed) for c in clashes] == [("a-b.c", "a.b-c"), ("a-b.c", "a.b.c")]


def test_a_disambiguated_name_of_a_63_character_id_is_still_a_label() -> None:
    slot_id = "a" * 30 + "." + "b" * 32
    name = disambiguated_name(slot_id)
    assert len(name) == 63
    assert LABEL.fullmatch(name)
    assert name != disambiguated_name("a" * 30 + "-" + "b" * 32)


@pytest.mark.parametrize(
    "slot_ids",
    [
        pytest.param(["...-."], id="no-letter-or-digit"),
        pytest.param(["...-.", "---", "-.-", "c0-p0"], id="several-without-a-label"),
        pytest.param(["a.b", "a-b", "a-b-" + disambiguated_name("a.b").rsplit("-", 1)[1]], id="hash-name-taken"),
    ],
)
def test_every_slot_gets_a_distinct_dns_label(slot_ids: list[str]) -> None:
    names, clashes = device_names(slot_ids)
    assert sorted(names.values()) == sorted(slot_ids)  # every slot offered
    assert all(LABEL.fullmatch(name) for name in names), names
    assert all(clash.renamed_as for clash in clashes)


def test_a_name_of_its_own_is_the_same_whatever_the_order() -> None:
    slot_ids = ["a.b", "a-b", "a-b-" + disambiguated_name("a.b").rsplit("-", 1)[1], "...-."]
    assert device_names(slot_ids)[0] == device_names(reversed(slot_ids))[0]
