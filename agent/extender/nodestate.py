"""A node's published slot state, built once into a frozen value that scoring only reads.

:func:`node_state` is the one builder: node name, version, the published slot records
(``{id, card, numa, platform, bitstream, accelerator, free, healthy, last_used}``) and the
catalog (bitstream -> platform). Today the records come from the Node annotations the agent
writes (:func:`read_node_slots`); a malformed state counts as none, logged once per version.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from agent.slots.eviction import eviction_key
from agent.slots.published import parse_state

logger = logging.getLogger(__name__)

SLOTS_ANNOTATION = "example.com/fpga-slots"
BITSTREAMS_ANNOTATION = "example.com/fpga-bitstreams"
#: The agent's heartbeat and how old it may be (renewed every 300 s, three may be missed).
HEARTBEAT_ANNOTATION = "example.com/fpga-agent-heartbeat"
STALE_AFTER_S = 960.0
#: Longest annotation read: all of an object's annotations together may hold 256 KiB.
MAX_ANNOTATION_BYTES = 256 * 1024
#: Deepest nesting read: the agent writes a list of objects (2 levels).
MAX_NESTING = 8
#: Slots and catalog entries read of one node at most.
MAX_SLOTS = 128
MAX_BITSTREAMS = 1024
#: Longest name (slot id, card, platform, bitstream, accelerator) read, as agent.slots.published writes them.
MAX_NAME_CHARS = 256
#: Nodes remembered as reported malformed (cleared when full).
MALFORMED_MEMORY = 10_000
#: Distinct catalogs shared between nodes (cleared when full or past the bytes).
CATALOG_MEMORY = 256
CATALOG_MEMORY_BYTES = 8 * 1024 * 1024


class NodeStateError(ValueError):
    """Published state that is not what the agent writes."""


@dataclass(frozen=True, slots=True)
class PublishedSlot:
    """One slot as the node's agent published it."""

    id: str
    card: str
    numa: int | None
    platform: str
    bitstream: str | None
    accelerator: str | None
    free: bool
    healthy: bool
    last_used: int | None


class LoadedSlot(NamedTuple):
    """A free, healthy slot that holds something: a candidate for reuse or eviction."""

    #: When a pod last held it (epoch seconds); 0 when never or unknown, which sorts it first.
    last_used: int
    bitstream: str | None


@dataclass(frozen=True, slots=True)
class NodeSlots:
    """The published state of one node, with the counts scoring needs (all derived from ``slots``)."""

    name: str
    resource_version: str
    slots: tuple[PublishedSlot, ...]
    #: Bitstream name -> platform: what this node can program (its catalog, and what it can pull).
    bitstreams: Mapping[str, str]
    #: Platform -> healthy slots of that platform (free or held).
    healthy: Mapping[str, int] = field(default_factory=dict)
    #: Free healthy slots in total.
    free: int = 0
    #: Healthy slots in total (what the node advertises as allocatable).
    size: int = 0
    #: Platform -> free healthy slots that hold nothing.
    free_empty: Mapping[str, int] = field(default_factory=dict)
    #: (bitstream, platform) -> free healthy slots of that platform that hold it.
    free_loaded: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: Bitstream -> free healthy slots that hold it, whatever their platform (the copies a pod can be promised).
    free_held: Mapping[str, int] = field(default_factory=dict)
    #: Platform -> free healthy slots that hold something, least recently used first.
    reusable: Mapping[str, tuple[LoadedSlot, ...]] = field(default_factory=dict)
    #: The free healthy slots in the order the scheduler's DRA allocator takes them (``agent.slots.eviction``).
    free_order: tuple[PublishedSlot, ...] = ()
    #: The node's own catalog, as published (``bitstreams`` adds the declared ones it can pull).
    catalog: Mapping[str, str] = field(default_factory=dict)
    #: Names in ``bitstreams`` that the node must pull first (declared in the cluster, not in its catalog).
    downloads: frozenset[str] = frozenset()
    #: The agent's latest heartbeat (epoch seconds); None: an agent that publishes none.
    heartbeat: float | None = None
    #: Platform -> the last use of its least recently used free loaded slot (0: never): the cheapest to overwrite.
    oldest: Mapping[str, int] = field(default_factory=dict)
    #: ``packing(1)``: the packing of a one-slot pod here.
    pack1: int = 0
    #: About how many bytes the published state took (what the state table counts against its budget).
    weight: int = 0

    def stale(self, now: float) -> bool:
        """Whether the agent that published this is gone: its heartbeat older than ``STALE_AFTER_S``."""
        return self.heartbeat is not None and now - self.heartbeat > STALE_AFTER_S

    def packing(self, count: int) -> int:
        """kube-scheduler's MostAllocated score (0..100) of this node's slots for a pod asking ``count``."""
        return _packing(self.size, self.free, count)

    def declaring(self, declared: Mapping[str, str]) -> NodeSlots:
        """This state with the cluster's declared bitstreams (name -> platform) that the node lacks but has
        healthy slots for, as bitstreams it can pull (``downloads``); self when that changes nothing."""
        pullable = {n: p for n, p in declared.items() if n not in self.catalog and p in self.healthy}
        if pullable.keys() == self.downloads and all(self.bitstreams[n] == p for n, p in pullable.items()):
            return self
        bitstreams = {**self.catalog, **pullable} if pullable else self.catalog
        return dataclasses.replace(self, bitstreams=bitstreams, downloads=frozenset(pullable))


def node_state(
    name: str,
    version: str,
    records: Sequence[Mapping[str, Any]],
    platforms: Mapping[str, str],
    heartbeat: float | None = None,
) -> NodeSlots:
    """The one builder of a node's state: its slot records and its catalog (bitstream -> platform), checked
    (NodeStateError naming the first problem) and counted for scoring."""
    if len(records) > MAX_SLOTS:
        raise NodeStateError(f"{len(records)} slots published, more than {MAX_SLOTS}")
    if len(platforms) > MAX_BITSTREAMS:
        raise NodeStateError(f"{len(platforms)} bitstreams published, more than {MAX_BITSTREAMS}")
    for bitstream, platform in platforms.items():
        if not _is_name(bitstream) or not _is_name(platform):
            raise NodeStateError(
                f"catalog entry {bitstream[:80]!r}: name and platform of 1-{MAX_NAME_CHARS} characters"
            )
    slots: list[PublishedSlot] = []
    seen: set[str] = set()
    for index, raw in enumerate(records):
        if not isinstance(raw, Mapping):
            raise NodeStateError(f"slot [{index}] is not an object")
        slot = _slot(raw, f"slot [{index}]")
        if slot.id in seen:
            raise NodeStateError(f"slot [{index}]: slot id {slot.id!r} appears twice")
        seen.add(slot.id)
        slots.append(slot)
    healthy: dict[str, int] = {}
    free_empty: dict[str, int] = {}
    free_loaded: dict[tuple[str, str], int] = {}
    free_held: dict[str, int] = {}
    reusable: dict[str, list[LoadedSlot]] = {}
    in_order: list[PublishedSlot] = []
    weight = 200 + 60 * len(platforms)
    for slot in slots:
        weight += 200 + len(slot.id) + len(slot.bitstream or "")
        if not slot.healthy:
            continue
        healthy[slot.platform] = healthy.get(slot.platform, 0) + 1
        if not slot.free:
            continue
        in_order.append(slot)
        if slot.bitstream is None and slot.accelerator is None:
            free_empty[slot.platform] = free_empty.get(slot.platform, 0) + 1
            continue
        if slot.bitstream is not None:
            key = (slot.bitstream, slot.platform)
            free_loaded[key] = free_loaded.get(key, 0) + 1
            free_held[slot.bitstream] = free_held.get(slot.bitstream, 0) + 1
        reusable.setdefault(slot.platform, []).append(LoadedSlot(slot.last_used or 0, slot.bitstream))
    weight += sum(len(b) + len(p) for b, p in platforms.items())
    return NodeSlots(
        name=name,
        resource_version=version,
        slots=tuple(slots),
        bitstreams=platforms,  # kept, not copied: nodes with the same catalog text share one mapping
        catalog=platforms,
        healthy=healthy,
        free=len(in_order),
        size=sum(healthy.values()),
        free_empty=free_empty,
        free_loaded=free_loaded,
        free_held=free_held,
        reusable={p: tuple(sorted(v)) for p, v in reusable.items()},
        free_order=tuple(sorted(in_order, key=lambda s: eviction_key(s.bitstream, s.last_used, s.id))),
        heartbeat=heartbeat,
        weight=weight,
        oldest={p: min(slot.last_used for slot in v) for p, v in reusable.items()},
        pack1=_packing(sum(healthy.values()), len(in_order), 1),
    )


def _packing(size: int, free: int, count: int) -> int:
    return 0 if size <= 0 else min(100, (size - free + count) * 100 // size)


def parse_node_slots(name: str, resource_version: str, annotations: Mapping[str, str]) -> NodeSlots | None:
    """The node's state from its annotations; None when it has published none. NodeStateError when malformed."""
    slots_text = annotations.get(SLOTS_ANNOTATION)
    bitstreams_text = annotations.get(BITSTREAMS_ANNOTATION)
    if slots_text is None and bitstreams_text is None:
        return None
    if slots_text is None or bitstreams_text is None:
        missing = SLOTS_ANNOTATION if slots_text is None else BITSTREAMS_ANNOTATION
        raise NodeStateError(f"{missing} is missing (the agent publishes both annotations together)")
    if not isinstance(slots_text, str) or not isinstance(bitstreams_text, str):
        raise NodeStateError("the annotations are not strings")
    records = _load(slots_text, SLOTS_ANNOTATION)
    if not isinstance(records, list):
        raise NodeStateError(f"{SLOTS_ANNOTATION} is not a JSON list")
    heartbeat = annotations.get(HEARTBEAT_ANNOTATION)
    beat: float | None = None
    if heartbeat is not None:
        try:
            beat = float(heartbeat) if isinstance(heartbeat, str) and len(heartbeat) <= 20 else float("nan")
        except ValueError:
            beat = float("nan")
        if beat != beat:  # NaN: not a number
            raise NodeStateError(f"{HEARTBEAT_ANNOTATION} is not epoch seconds")
    return node_state(name, resource_version, records, _catalog(bitstreams_text), beat)


class _Catalogs:
    """Catalog annotation text -> its parsed mapping, shared by the nodes that publish the same text; bounded in
    entries and bytes (cleared when full). Safe from the watch's threads."""

    def __init__(self) -> None:
        self._parsed: dict[str, dict[str, str]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, text: str) -> dict[str, str]:
        with self._lock:
            known = self._parsed.get(text)
        if known is not None:
            return known
        data = _load(text, BITSTREAMS_ANNOTATION)
        if not isinstance(data, dict):
            raise NodeStateError(f"{BITSTREAMS_ANNOTATION} is not a JSON object")
        for bitstream, platform in data.items():
            if not isinstance(platform, str) or not platform:
                raise NodeStateError(f"{BITSTREAMS_ANNOTATION}[{bitstream[:80]!r}]: the platform is not a string")
        with self._lock:
            if len(self._parsed) >= CATALOG_MEMORY or self._bytes + len(text) > CATALOG_MEMORY_BYTES:
                self._parsed.clear()
                self._bytes = 0
            self._parsed[text] = data
            self._bytes += len(text)
        return data


CATALOGS = _Catalogs()


def _catalog(text: str) -> dict[str, str]:
    return CATALOGS.get(text)


class MalformedLog:
    """Says once per node and resourceVersion that its published state is unusable. Bounded; thread-safe."""

    def __init__(self, capacity: int = MALFORMED_MEMORY) -> None:
        self._capacity = capacity
        self._reported: dict[str, str] = {}
        self._lock = threading.Lock()

    def report(self, name: str, resource_version: str, error: NodeStateError) -> None:
        key, version = name[:MAX_NAME_CHARS], resource_version[:64]
        with self._lock:
            if self._reported.get(key) == version:
                return
            if len(self._reported) >= self._capacity:
                self._reported.clear()
            self._reported[key] = version
        logger.warning("node %s (resourceVersion %s) has unusable slot state, treated as none: %s", key, version, error)


MALFORMED = MalformedLog()


def read_published_state(obj: Mapping[str, Any], *, log: MalformedLog = MALFORMED) -> tuple[str, NodeSlots | None]:
    """A node's FpgaNodeState as the API server sends it: (node name, its state or None when unusable, logged
    once per resourceVersion). ValueError only for an object without a name (the watch skips it)."""
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ValueError("FpgaNodeState without metadata.name")
    version = str(metadata.get("resourceVersion") or "") if isinstance(metadata, Mapping) else ""
    try:
        published = parse_state(obj)
        records = [dict(slot) for slot in published.slots]
        return name, node_state(name, published.version, records, published.bitstreams)
    except ValueError as exc:
        log.report(name, version, exc if isinstance(exc, NodeStateError) else NodeStateError(str(exc)))
        return name, None


def read_node_slots(
    name: str, resource_version: str, annotations: Mapping[str, str], *, log: MalformedLog = MALFORMED
) -> NodeSlots | None:
    """:func:`parse_node_slots`, with a malformed state logged (once) and read as none, and so is the state of
    an agent that is gone (:meth:`NodeSlots.stale`): one node's annotations cost only that node."""
    try:
        state = parse_node_slots(name, resource_version, annotations)
        return None if state is not None and state.stale(time.time()) else state
    except NodeStateError as exc:
        log.report(name, resource_version, exc)
    except Exception as exc:  # a case nobody thought of: never the whole table
        log.report(name, resource_version, NodeStateError(f"unreadable ({type(exc).__name__}: {exc})"[:200]))
    return None


def _load(text: str, what: str) -> Any:
    """JSON of at most MAX_ANNOTATION_BYTES and MAX_NESTING levels."""
    if len(text) > MAX_ANNOTATION_BYTES:
        raise NodeStateError(f"{what} is {len(text)} characters long, more than {MAX_ANNOTATION_BYTES}")
    if text.count("[") + text.count("{") > MAX_NESTING:  # else it cannot nest deeper: no scan
        depth = nesting_depth(text)
        if depth > MAX_NESTING:
            raise NodeStateError(f"{what} is nested {depth} levels deep, more than {MAX_NESTING}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise NodeStateError(f"{what} is not valid JSON: {exc}") from None


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def nesting_depth(text: str) -> int:
    """How deeply arrays and objects nest in JSON ``text`` (brackets inside strings do not count)."""
    level = deepest = 0
    for bracket in _BRACKETS.findall(_JSON_STRING.sub("", text)):
        level += 1 if bracket in "[{" else -1
        deepest = max(deepest, level)
    return deepest


def _is_name(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS


def _slot(raw: Mapping[str, Any], where: str) -> PublishedSlot:
    slot_id = raw.get("id")
    if not _is_name(slot_id):
        raise NodeStateError(f"{where}: id is not a string of 1-{MAX_NAME_CHARS} characters")
    assert isinstance(slot_id, str)
    platform = raw.get("platform")
    if not isinstance(platform, str) or len(platform) > MAX_NAME_CHARS:
        raise NodeStateError(f"{where} (slot {slot_id}): platform is not a string of at most {MAX_NAME_CHARS}")
    free = raw.get("free")
    healthy = raw.get("healthy")
    if not isinstance(free, bool) or not isinstance(healthy, bool):
        raise NodeStateError(f"{where} (slot {slot_id}): free and healthy must be true or false")
    return PublishedSlot(
        id=slot_id,
        card=_optional_str(raw, "card", where) or "",
        numa=_optional_int(raw, "numa", where),
        platform=platform,
        bitstream=_optional_str(raw, "bitstream", where) or None,
        accelerator=_optional_str(raw, "accelerator", where) or None,
        free=free,
        healthy=healthy,
        last_used=_optional_int(raw, "last_used", where),
    )


def _optional_str(raw: Mapping[str, Any], key: str, where: str) -> str | None:
    value = raw.get(key)
    if value is None or (isinstance(value, str) and len(value) <= MAX_NAME_CHARS):
        return value
    raise NodeStateError(f"{where}: {key} is not a string of at most {MAX_NAME_CHARS} characters, or null")


def _optional_int(raw: Mapping[str, Any], key: str, where: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise NodeStateError(f"{where}: {key} is not an integer or null")
    return value
