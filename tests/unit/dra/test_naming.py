"""Slot IDs as DRA device names (DNS labels)."""

from __future__ import annotations

import re

import pytest

from agent.dra import device_name
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
