"""A node's published slot state, parsed once into a frozen value that scoring reads without work.

The agent on each node writes two annotations on its Node (see ``agent.kube.nodes``):

* ``example.com/fpga-slots``: a compact JSON list, one object per slot:
  ``{"id", "card", "numa", "platform", "bitstream", "accelerator", "free", "healthy", "last_used"}``;
* ``example.com/fpga-bitstreams``: a JSON object, catalog name -> platform id, the
  bitstreams this node's catalog can program.

The scheduler asks about hundreds of nodes per pod, so whatever scoring needs is
counted here, once per node update (in the node watch's worker thread, or once per
``(name, resourceVersion)`` for Node objects that arrive in a request), and the
scoring functions only look numbers up.

A node without both annotations has no published state (``None``): an agent that
has not started yet, or a node without FPGAs. Nor has a node whose agent is gone: the
agent renews ``example.com/fpga-agent-heartbeat`` (epoch seconds) every 5 minutes, and
a state whose heartbeat is older than ``STALE_AFTER_S`` is none (an agent killed, or
uninstalled without the clean stop that removes its keys). A state without a heartbeat
comes from an agent that predates it and is taken as it is. A malformed annotation is the same as
none, logged once per node and resourceVersion, because a broken publisher must not
make the extender fail nodes it knows nothing reliable about.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from agent.slots.eviction import eviction_key

logger = logging.getLogger(__name__)

SLOTS_ANNOTATION = "example.com/fpga-slots"
BITSTREAMS_ANNOTATION = "example.com/fpga-bitstreams"
#: The agent's heartbeat and how old it may be (agent.kube.nodes: renewed every 300 s, three may be missed).
HEARTBEAT_ANNOTATION = "example.com/fpga-agent-heartbeat"
STALE_AFTER_S = 960.0
#: Nodes remembered as already reported malformed (cleared when full; a repeat costs one log line).
MALFORMED_MEMORY = 10_000
#: Distinct catalog annotations remembered, parsed (cleared when full).
CATALOG_MEMORY = 256
#: Longest annotation read: all of an object's annotations together may hold 256 KiB.
MAX_ANNOTATION_BYTES = 256 * 1024
#: Deepest nesting read: the agent writes a list of objects (2 levels).
MAX_NESTING = 8


#: (id of a catalog, downloads) -> (that catalog, the mapping with the downloads): see NodeSlots.declaring.
Derived = dict[tuple[int, frozenset[str]], tuple[Mapping[str, str], Mapping[str, str]]]


class NodeStateError(ValueError):
    """A published annotation that is not what the agent writes."""


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
    """The published state of one node, with the counts scoring needs (all derived from ``slots``).

    The mappings are plain dicts typed read-only (scoring looks them up hundreds of
    thousands of times per second; a MappingProxyType lookup costs several times more).
    Nothing changes them after :meth:`build`.
    """

    name: str
    resource_version: str
    slots: tuple[PublishedSlot, ...]
    #: Bitstream name -> platform: what this node can program (its catalog, and what it can pull).
    bitstreams: Mapping[str, str]
    #: Platform -> healthy slots of that platform (free or held).
    healthy: Mapping[str, int] = field(default_factory=dict)
    #: Free healthy slots in total.
    free: int = 0
    #: Healthy slots in total (what the node's device plugin advertises as allocatable).
    size: int = 0
    #: Platform -> free healthy slots of that platform (empty or not).
    free_by_platform: Mapping[str, int] = field(default_factory=dict)
    #: Platform -> free healthy slots that hold nothing.
    free_empty: Mapping[str, int] = field(default_factory=dict)
    #: (bitstream, platform) -> free healthy slots of that platform that hold it.
    free_loaded: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: Bitstream -> free healthy slots that hold it, whatever their platform (the copies a pod can be promised).
    free_held: Mapping[str, int] = field(default_factory=dict)
    #: Platform -> free healthy slots that hold something, least recently used first.
    reusable: Mapping[str, tuple[LoadedSlot, ...]] = field(default_factory=dict)
    #: The free healthy slots in the order the node's DRA ResourceSlice lists them (``agent.slots.eviction``):
    #: the order in which the scheduler's allocator takes them.
    free_order: tuple[PublishedSlot, ...] = ()
    #: The latest last use of a free slot that holds something (epoch seconds; 0: none or never):
    #: scores that evict here age with the clock until this is ``LRU_HORIZON_S`` old.
    recent_use: int = 0
    #: The node's own catalog, as published (``bitstreams`` adds the declared ones it can pull).
    catalog: Mapping[str, str] = field(default_factory=dict)
    #: Names in ``bitstreams`` that the node must pull first (declared in the cluster, not in its catalog).
    downloads: frozenset[str] = frozenset()
    #: The agent's latest heartbeat (epoch seconds); None: an agent that publishes none.
    heartbeat: float | None = None
    #: Answers already worked out for this state (scoring's memo; the state itself never changes).
    memo: dict[str, object] = field(default_factory=dict, compare=False, repr=False)

    def stale(self, now: float) -> bool:
        """Whether the agent that published this is gone: its heartbeat older than ``STALE_AFTER_S``."""
        return self.heartbeat is not None and now - self.heartbeat > STALE_AFTER_S

    def packing(self, count: int) -> int:
        """kube-scheduler's MostAllocated score (0..100) of this node's slots for a pod asking ``count``:
        the share in use with the pod's own request counted, in whole points."""
        if self.size <= 0:
            return 0
        return min(100, (self.size - self.free + count) * 100 // self.size)

    def declaring(self, declared: Mapping[str, str], shared: Derived | None = None) -> NodeSlots:
        """This state with the cluster's declared bitstreams (name -> platform) that the node lacks but has
        healthy slots for, as bitstreams it can pull (``downloads``); self when that changes nothing.
        With ``shared`` (kept by the caller for one ``declared``), nodes with the same catalog and the same
        downloads share one ``bitstreams`` mapping."""
        pullable = {
            name: platform
            for name, platform in declared.items()
            if name not in self.catalog and platform in self.healthy
        }
        if pullable.keys() == self.downloads and all(self.bitstreams[n] == p for n, p in pullable.items()):
            return self
        downloads = frozenset(pullable)
        key = (id(self.catalog), downloads)
        known = shared.get(key) if shared is not None else None
        if known is not None and known[0] is self.catalog:
            bitstreams = known[1]
        else:
            bitstreams = {**self.catalog, **pullable}
            if shared is not None:
                if len(shared) >= CATALOG_MEMORY:
                    shared.clear()
                shared[key] = (self.catalog, bitstreams)  # the catalog kept alive: its id stays its own
        return dataclasses.replace(self, bitstreams=bitstreams, downloads=downloads, memo={})

    @classmethod
    def build(
        cls, name: str, resource_version: str, slots: tuple[PublishedSlot, ...], bitstreams: Mapping[str, str]
    ) -> NodeSlots:
        """The state with its counts; ``bitstreams`` is kept as given (never change it afterwards)."""
        healthy: dict[str, int] = {}
        free_by_platform: dict[str, int] = {}
        free_empty: dict[str, int] = {}
        free_loaded: dict[tuple[str, str], int] = {}
        free_held: dict[str, int] = {}
        reusable: dict[str, list[LoadedSlot]] = {}
        free = 0
        in_order: list[PublishedSlot] = []
        for slot in slots:
            if not slot.healthy:
                continue
            healthy[slot.platform] = healthy.get(slot.platform, 0) + 1
            if not slot.free:
                continue
            free += 1
            in_order.append(slot)
            free_by_platform[slot.platform] = free_by_platform.get(slot.platform, 0) + 1
            if slot.bitstream is None and slot.accelerator is None:
                free_empty[slot.platform] = free_empty.get(slot.platform, 0) + 1
                continue
            if slot.bitstream is not None:
                key = (slot.bitstream, slot.platform)
                free_loaded[key] = free_loaded.get(key, 0) + 1
                free_held[slot.bitstream] = free_held.get(slot.bitstream, 0) + 1
            reusable.setdefault(slot.platform, []).append(LoadedSlot(slot.last_used or 0, slot.bitstream))
        return cls(
            name=name,
            resource_version=resource_version,
            slots=slots,
            bitstreams=bitstreams,  # kept, not copied: nodes with the same catalog share one mapping
            catalog=bitstreams,
            healthy=healthy,
            free=free,
            size=sum(healthy.values()),
            free_by_platform=free_by_platform,
            free_empty=free_empty,
            free_loaded=free_loaded,
            free_held=free_held,
            reusable={p: tuple(sorted(v)) for p, v in reusable.items()},
            free_order=tuple(sorted(in_order, key=lambda s: eviction_key(s.bitstream, s.last_used, s.id))),
            recent_use=max((slot.last_used for slots in reusable.values() for slot in slots), default=0),
        )


def parse_slots_annotation(text: str) -> tuple[PublishedSlot, ...]:
    """The ``example.com/fpga-slots`` list; NodeStateError naming the first problem."""
    data = _load(text, SLOTS_ANNOTATION)
    if not isinstance(data, list):
        raise NodeStateError(f"{SLOTS_ANNOTATION} is not a JSON list")
    slots: list[PublishedSlot] = []
    seen: set[str] = set()
    for index, raw in enumerate(data):
        if not isinstance(raw, dict):
            raise NodeStateError(f"{SLOTS_ANNOTATION}[{index}] is not an object")
        slot = _slot(raw, f"{SLOTS_ANNOTATION}[{index}]")
        if slot.id in seen:
            raise NodeStateError(f"{SLOTS_ANNOTATION}[{index}]: slot id {slot.id!r} appears twice")
        seen.add(slot.id)
        slots.append(slot)
    return tuple(slots)


def parse_bitstreams_annotation(text: str) -> dict[str, str]:
    """The ``example.com/fpga-bitstreams`` object; NodeStateError naming the first problem."""
    data = _load(text, BITSTREAMS_ANNOTATION)
    if not isinstance(data, dict):
        raise NodeStateError(f"{BITSTREAMS_ANNOTATION} is not a JSON object")
    for name, platform in data.items():
        if not isinstance(platform, str) or not platform:
            raise NodeStateError(f"{BITSTREAMS_ANNOTATION}[{name!r}]: the platform is not a non-empty string")
    return data


def parse_node_slots(name: str, resource_version: str, annotations: Mapping[str, str]) -> NodeSlots | None:
    """The node's published state; None when it has published none. Raises NodeStateError when malformed."""
    slots_text = annotations.get(SLOTS_ANNOTATION)
    bitstreams_text = annotations.get(BITSTREAMS_ANNOTATION)
    if slots_text is None and bitstreams_text is None:
        return None
    if slots_text is None or bitstreams_text is None:
        missing = SLOTS_ANNOTATION if slots_text is None else BITSTREAMS_ANNOTATION
        raise NodeStateError(f"{missing} is missing (the agent publishes both annotations together)")
    if not isinstance(slots_text, str) or not isinstance(bitstreams_text, str):
        raise NodeStateError("the annotations are not strings")
    state = NodeSlots.build(name, resource_version, parse_slots_annotation(slots_text), _catalog(bitstreams_text))
    heartbeat = annotations.get(HEARTBEAT_ANNOTATION)
    if heartbeat is None:
        return state
    try:
        beat = float(heartbeat) if isinstance(heartbeat, str) and len(heartbeat) <= 20 else float("nan")
    except ValueError:
        beat = float("nan")
    if beat != beat:  # NaN: not a number
        raise NodeStateError(f"{HEARTBEAT_ANNOTATION} is not epoch seconds")
    return dataclasses.replace(state, heartbeat=beat)


#: Catalog annotation text -> its parsed mapping, shared by every node that publishes the same text.
_CATALOGS: dict[str, dict[str, str]] = {}


def _catalog(text: str) -> dict[str, str]:
    """The parsed catalog, one mapping per distinct text: nodes of one kind share it (memory, and the
    extender's one-slot index tells catalogs apart by identity first). Safe from the watch's threads."""
    catalog = _CATALOGS.get(text)
    if catalog is None:
        catalog = parse_bitstreams_annotation(text)
        if len(_CATALOGS) >= CATALOG_MEMORY:
            _CATALOGS.clear()
        _CATALOGS[text] = catalog
    return catalog


class MalformedLog:
    """Says once per node and resourceVersion that its published state is unusable. Thread-safe."""

    def __init__(self, capacity: int = MALFORMED_MEMORY) -> None:
        self._capacity = capacity
        self._reported: dict[str, str] = {}
        self._lock = threading.Lock()

    def report(self, name: str, resource_version: str, error: NodeStateError) -> None:
        with self._lock:
            if self._reported.get(name) == resource_version:
                return
            if len(self._reported) >= self._capacity:
                self._reported.clear()
            self._reported[name] = resource_version
        logger.warning(
            "node %s (resourceVersion %s) has unusable slot state, treated as none: %s",
            name,
            resource_version or "-",
            error,
        )


MALFORMED = MalformedLog()


def read_node_slots(
    name: str, resource_version: str, annotations: Mapping[str, str], *, log: MalformedLog = MALFORMED
) -> NodeSlots | None:
    """Like :func:`parse_node_slots`, but a malformed state is logged (once) and read as none, and so is the
    state of an agent that is gone (:meth:`NodeSlots.stale`).

    Whatever one node's annotations hold costs only that node: any failure to read them,
    not only the ones foreseen, makes it a node without published state.
    """
    try:
        state = parse_node_slots(name, resource_version, annotations)
        return None if state is not None and state.stale(time.time()) else state
    except NodeStateError as exc:
        log.report(name, resource_version, exc)
    except Exception as exc:  # a parser bug or a case nobody thought of: never the whole node cache
        log.report(name, resource_version, NodeStateError(f"unreadable ({type(exc).__name__}: {exc})"[:200]))
    return None


def _load(text: str, what: str) -> Any:
    """JSON of at most MAX_ANNOTATION_BYTES and MAX_NESTING levels (checked before it is parsed)."""
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


def _slot(raw: Mapping[str, Any], where: str) -> PublishedSlot:
    slot_id = raw.get("id")
    if not isinstance(slot_id, str) or not slot_id:
        raise NodeStateError(f"{where}: id is not a non-empty string")
    platform = raw.get("platform")
    if not isinstance(platform, str):
        raise NodeStateError(f"{where} (slot {slot_id}): platform is not a string")
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
    if value is None or isinstance(value, str):
        return value
    raise NodeStateError(f"{where}: {key} is not a string or null")


def _optional_int(raw: Mapping[str, Any], key: str, where: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise NodeStateError(f"{where}: {key} is not an integer or null")
    return value
