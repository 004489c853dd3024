"""The name of a slot as a DRA device: a DNS label, distinct per slot, depending only on the slot IDs
(docs/dra.md, "Slot IDs that are one device name")."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

_NOT_IN_LABEL = re.compile(r"[^a-z0-9-]")
MAX_NAME = 63
#: Hex digits of the slot ID's hash in a disambiguated name.
SUFFIX_DIGITS = 8
#: Tries at a name of its own: the SHA-256's 64 hex digits, 8 at a time.
DIGEST_CHUNKS = 64 // SUFFIX_DIGITS


def _label(slot_id: str) -> str:
    return _NOT_IN_LABEL.sub("-", slot_id.lower()).strip("-")


def device_name(slot_id: str) -> str:
    """The slot's device name when no other slot has it: forbidden characters become ``-``; never empty."""
    return _label(slot_id) or disambiguated_name(slot_id)


def disambiguated_name(slot_id: str, attempt: int = 0) -> str:
    """The slot's name when another has its plain one: ``-`` and the ``attempt``-th 8 hex digits of its SHA-256."""
    start = attempt * SUFFIX_DIGITS
    digest = hashlib.sha256(slot_id.encode()).hexdigest()[start : start + SUFFIX_DIGITS]
    stem = _label(slot_id)[: MAX_NAME - SUFFIX_DIGITS - 1].rstrip("-")
    return f"{stem}-{digest}" if stem else digest


@dataclass(frozen=True, slots=True)
class NameClash:
    """Two slots with one plain device name: ``kept`` has it, ``renamed`` is offered as ``renamed_as`` ("": not
    offered, that name being taken too)."""

    name: str
    kept: str
    renamed: str
    renamed_as: str


def device_names(slot_ids: Iterable[str]) -> tuple[dict[str, str], list[NameClash]]:
    """Device name -> slot ID for every slot, and the clashes that gave slots a disambiguated name (the plain name
    goes to the slot whose ID is the name, else the first by ID)."""
    slots: dict[str, str] = {}
    clashes = []
    ordered = sorted(set(slot_ids), key=lambda s: (device_name(s) != s, s))
    plain = {device_name(s) for s in ordered}
    for slot_id in ordered:
        name = device_name(slot_id)
        if name not in slots:
            slots[name] = slot_id
            continue
        candidates = (disambiguated_name(slot_id, attempt) for attempt in range(DIGEST_CHUNKS))
        other = next((c for c in candidates if c not in slots and c not in plain), "")
        if other:
            slots[other] = slot_id
        clashes.append(NameClash(name, slots[name], slot_id, other))  # "": every name taken, not offered
    return slots, clashes
