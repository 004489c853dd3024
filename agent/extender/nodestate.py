"""A node's published slot state (schema: ``agent.slots.published``), built once into a frozen value for scoring."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from agent.slots import published
from agent.slots.model import eviction_key

logger = logging.getLogger(__name__)

#: Nodes remembered as reported malformed (cleared when full).
MALFORMED_MEMORY = 10_000


class WatchedNode(NamedTuple):
    """A node from the watch: its name, and its published state or None when unusable."""

    name: str
    state: NodeSlots | None


class LoadedSlot(NamedTuple):
    """A free, healthy slot that holds something: a candidate for reuse or eviction."""

    #: When a pod last held it (epoch seconds); 0 when never or unknown, which sorts it first.
    last_used: int
    bitstream: str | None


@dataclass(frozen=True, slots=True)
class NodeSlots:
    """The published state of one node, with the counts scoring needs (all derived from ``slots``)."""

    name: str
    slots: tuple[published.PublishedSlot, ...]
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
    #: Platform -> free healthy slots that hold something, least recently used first.
    reusable: Mapping[str, tuple[LoadedSlot, ...]] = field(default_factory=dict)
    #: The free healthy slots in the order the scheduler's DRA allocator takes them (``eviction_key``).
    free_order: tuple[published.PublishedSlot, ...] = ()
    #: The node's own catalog, as published (``bitstreams`` adds the declared ones it can pull).
    catalog: Mapping[str, str] = field(default_factory=dict)
    #: Names in ``bitstreams`` that the node must pull first (declared in the cluster, not in its catalog).
    downloads: frozenset[str] = frozenset()
    #: ``packing(1)``: the packing of a one-slot pod here.
    pack1: int = 0
    #: About how many bytes the published state took (what the state table counts against its budget).
    weight: int = 0

    def packing(self, count: int) -> int:
        """kube-scheduler's MostAllocated score (0..100) of this node's slots for a pod asking ``count``."""
        return _packing(self.size, self.free, count)

    def declaring(self, declared: Mapping[str, str]) -> NodeSlots:
        """This state plus the declared bitstreams (name -> platform) it lacks but has healthy slots for, as
        ``downloads``; self when that changes nothing."""
        pullable = {n: p for n, p in declared.items() if n not in self.catalog and p in self.healthy}
        if pullable.keys() == self.downloads and all(self.bitstreams[n] == p for n, p in pullable.items()):
            return self
        bitstreams = {**self.catalog, **pullable} if pullable else self.catalog
        return dataclasses.replace(self, bitstreams=bitstreams, downloads=frozenset(pullable))


def node_state(state: published.NodeState) -> NodeSlots:
    """The one builder of a node's state: its checked published state, counted for scoring."""
    name, platforms = state.node, state.bitstreams
    healthy: dict[str, int] = {}
    free_empty: dict[str, int] = {}
    free_loaded: dict[tuple[str, str], int] = {}
    reusable: dict[str, list[LoadedSlot]] = {}
    in_order: list[published.PublishedSlot] = []
    weight = 200 + 60 * len(platforms)
    for slot in state.slots:
        platform, bitstream = slot["platform"], slot["bitstream"]
        weight += 200 + len(slot["id"]) + len(bitstream or "")
        if not slot["healthy"]:
            continue
        healthy[platform] = healthy.get(platform, 0) + 1
        if not slot["free"]:
            continue
        in_order.append(slot)
        if bitstream is None and slot["accelerator"] is None:
            free_empty[platform] = free_empty.get(platform, 0) + 1
            continue
        if bitstream is not None:
            key = (bitstream, platform)
            free_loaded[key] = free_loaded.get(key, 0) + 1
        reusable.setdefault(platform, []).append(LoadedSlot(slot["last_used"] or 0, bitstream))
    weight += sum(len(b) + len(p) for b, p in platforms.items())
    return NodeSlots(
        name=name,
        slots=state.slots,
        bitstreams=platforms,  # kept, not copied: nodes with the same catalog text share one mapping
        catalog=platforms,
        healthy=healthy,
        free=len(in_order),
        size=sum(healthy.values()),
        free_empty=free_empty,
        free_loaded=free_loaded,
        reusable={p: tuple(sorted(v, key=lambda s: (s.last_used, s.bitstream or ""))) for p, v in reusable.items()},
        free_order=tuple(sorted(in_order, key=lambda s: eviction_key(s["bitstream"], s["last_used"], s["id"]))),
        weight=weight,
        pack1=_packing(sum(healthy.values()), len(in_order), 1),
    )


def _packing(size: int, free: int, count: int) -> int:
    return 0 if size <= 0 else min(100, (size - free + count) * 100 // size)


class MalformedLog:
    """Says once per node and resourceVersion that its published state is unusable. Bounded; thread-safe."""

    def __init__(self, capacity: int = MALFORMED_MEMORY) -> None:
        self._capacity = capacity
        self._reported: dict[str, str] = {}
        self._lock = threading.Lock()

    def report(self, name: str, resource_version: str, error: ValueError) -> None:
        key, version = name[:256], resource_version[:64]
        with self._lock:
            if self._reported.get(key) == version:
                return
            if len(self._reported) >= self._capacity:
                self._reported.clear()
            self._reported[key] = version
        logger.warning("node %s (resourceVersion %s) has unusable slot state, treated as none: %s", key, version, error)


MALFORMED = MalformedLog()


def read_published_state(obj: Mapping[str, Any], *, log: MalformedLog = MALFORMED) -> WatchedNode:
    """One FpgaNodeState (unusable state logged once per resourceVersion); ValueError for an object without a name."""
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ValueError("FpgaNodeState without metadata.name")
    version = str(metadata.get("resourceVersion") or "") if isinstance(metadata, Mapping) else ""
    try:
        return WatchedNode(name, node_state(published.parse_state(obj)))
    except ValueError as exc:
        log.report(name, version, exc)
        return WatchedNode(name, None)
