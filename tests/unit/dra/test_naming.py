"""Slot IDs as DRA device names (DNS labels)."""

from __future__ import annotations

import re

import pytest

from agent.dra import NameClash, device_name, device_names
from agent.slots import make_slot_id

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
def test_two_slots_with_one_name_give_it_to_one_of_them_whatever_the_order(order: list[str]) -> None:
    names, clashes = device_names(order)
    assert names == {"0000-3b-00-0-p1": "0000-3b-00-0-p1", "c0-p0": "c0-p0"}  # the ID that is the name keeps it
    assert clashes == [NameClash("0000-3b-00-0-p1", kept="0000-3b-00-0-p1", left_out="0000-3b-00.0-p1")]


def test_among_slots_none_of_whose_ids_is_the_name_the_first_by_id_keeps_it() -> None:
    names, clashes = device_names(["a.b.c", "a.b-c", "a-b.c"])
    assert names == {"a-b-c": "a-b.c"}
    assert clashes == [NameClash("a-b-c", "a-b.c", "a.b-c"), NameClash("a-b-c", "a-b.c", "a.b.c")]
