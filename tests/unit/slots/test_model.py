"""Slot IDs: stable, readable, within the kubelet's limit, never truncated; the order in which free slots are
overwritten: empty first, then the least recently used, then by slot ID."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.slots.model import MAX_SLOT_ID_LEN, DeviceNode, Health, Holder, Slot, SlotId, eviction_key, make_slot_id

ID_PATTERN = re.compile(r"[a-z0-9.-]+")


@pytest.mark.parametrize(
    ("card", "region", "expected"),
    [
        pytest.param("0000:3b:00.0", "port0", "0000-3b-00.0-port0", id="pci-address"),
        pytest.param("simcard0", "slot3", "simcard0-slot3", id="plain"),
        pytest.param("Card-A", "Region_1", "card-a-region-1", id="lower-cased"),
        pytest.param("dfl fme.0", "port  1", "dfl-fme.0-port-1", id="spaces-collapsed"),
        pytest.param("::card::", "/region/", "card-region", id="edges-stripped"),
    ],
)
def test_make_slot_id_is_readable(card: str, region: str, expected: str) -> None:
    assert make_slot_id(card, region) == expected


def test_make_slot_id_is_stable() -> None:
    first = make_slot_id("0000:3B:00.0", "Port0")
    assert make_slot_id("0000:3B:00.0", "Port0") == first
    assert make_slot_id("0000:3b:00.0", "port0") == first


def test_make_slot_id_keeps_distinct_regions_distinct() -> None:
    ids = {make_slot_id("0000:3b:00.0", f"port{n}") for n in range(4)}
    assert len(ids) == 4


def test_make_slot_id_accepts_exactly_the_limit() -> None:
    card = "c" * 31
    region = "r" * (MAX_SLOT_ID_LEN - len(card) - 1)
    slot_id = make_slot_id(card, region)
    assert len(slot_id) == MAX_SLOT_ID_LEN


def test_make_slot_id_rejects_long_ids_instead_of_truncating() -> None:
    card = "c" * 32
    region = "r" * (MAX_SLOT_ID_LEN - len(card))  # one character over
    with pytest.raises(ValueError, match="64 characters") as info:
        make_slot_id(card, region)
    assert str(MAX_SLOT_ID_LEN) in str(info.value)


@pytest.mark.parametrize(
    ("card", "region"),
    [
        pytest.param("", "port0", id="empty-card"),
        pytest.param("0000:3b:00.0", "", id="empty-region"),
        pytest.param(":::", "port0", id="card-only-unsafe"),
        pytest.param("card", "__", id="region-only-unsafe"),
    ],
)
def test_make_slot_id_rejects_empty_parts(card: str, region: str) -> None:
    with pytest.raises(ValueError, match="needs a card and a region"):
        make_slot_id(card, region)


@given(card=st.text(max_size=80), region=st.text(max_size=80))
def test_make_slot_id_result_is_always_a_valid_kubelet_id(card: str, region: str) -> None:
    try:
        slot_id = make_slot_id(card, region)
    except ValueError:
        return
    assert len(slot_id) <= MAX_SLOT_ID_LEN
    assert ID_PATTERN.fullmatch(slot_id)


@given(
    card=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=30),
    region=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=30),
)
def test_make_slot_id_keeps_safe_names_verbatim(card: str, region: str) -> None:
    assert make_slot_id(card, region) == f"{card}-{region}"


def _slot(slot_id: str) -> Slot:
    return Slot(
        id=SlotId(slot_id),
        card="c",
        region="r",
        numa=None,
        device_nodes=(DeviceNode("/dev/x", "/dev/y"),),
        platform="p",
        loaded=None,
        health=Health.HEALTHY,
        backend="test",
    )


def test_slot_rejects_an_overlong_id() -> None:
    assert _slot("x" * MAX_SLOT_ID_LEN).id == "x" * MAX_SLOT_ID_LEN
    with pytest.raises(ValueError, match="longer than 63"):
        _slot("x" * (MAX_SLOT_ID_LEN + 1))


def test_health_values_are_the_kubelet_spelling() -> None:
    assert [h.value for h in Health] == ["Healthy", "Unhealthy"]


@pytest.mark.parametrize(
    ("holder", "expected"),
    [
        pytest.param(Holder(allocated_at=1.0), "allocated (pod not yet known)", id="pod-unknown"),
        pytest.param(Holder(1.0, "default", "web", "main"), "default/web/main", id="pod-known"),
    ],
)
def test_holder_describe(holder: Holder, expected: str) -> None:
    assert holder.describe() == expected


def test_empty_slots_come_first_then_the_least_recently_used_then_by_id() -> None:
    slots = [
        ("c", "aes", 300.0),
        ("b", None, 500.0),  # empty (or unknown content), used once
        ("a", "sha", 300.0),  # as old as c: the ID decides
        ("d", "gz", None),  # never used: before any used one
        ("e", None, None),
        ("f", "fft", 100.0),
    ]
    ordered = sorted(slots, key=lambda s: eviction_key(s[1], s[2], s[0]))
    assert [s[0] for s in ordered] == ["e", "b", "d", "f", "a", "c"]


def test_whole_and_fractional_seconds_compare_alike() -> None:
    """The agent keeps last use in float seconds, its Node annotation publishes whole ones."""
    assert eviction_key("aes", 100, "x") == eviction_key("aes", 100.0, "x")
    assert eviction_key("aes", 0, "x") == eviction_key("aes", None, "x")
