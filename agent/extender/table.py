"""The state table: node name -> published state, fed by a list+watch, read by the handlers.

Bounded in nodes and in the bytes their states take; past either bound a node scores neutral (said once)."""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Mapping
from typing import Protocol

from agent.extender.nodestate import NodeSlots, WatchedNode

logger = logging.getLogger(__name__)

#: Nodes with published state kept at most, and the bytes their states take at most.
MAX_NODES = 50_000
MAX_STATE_BYTES = 512 * 1024 * 1024
#: Bitstreams declared by FpgaBitstream objects kept at most.
MAX_DECLARED = 10_000
#: Numbers the memo keeps at most (each a reference to a shared int under a shared name), and keys.
MAX_MEMO_ENTRIES = 500_000
MAX_MEMO_KEYS = 1024


class DeclaredBitstream(Protocol):
    """What the table reads of an FpgaBitstream (structurally: ``agent.bitstreams.Declaration``)."""

    @property
    def name(self) -> str: ...
    @property
    def platform(self) -> str: ...
    @property
    def scope(self) -> str: ...


class NodeMemo:
    """Numbers computed from nodes' states, per key then node name: a node's go when its state changes, all when the
    clock goes back, the least recently used key's past the bounds. A number counts until its key goes."""

    def __init__(self, max_entries: int = MAX_MEMO_ENTRIES, max_keys: int = MAX_MEMO_KEYS) -> None:
        self._by_key: dict[Hashable, dict[str, int]] = {}
        self._added: dict[Hashable, int] = {}
        self._entries = 0
        self._max_entries = max_entries
        self._max_keys = max_keys
        self._latest = float("-inf")

    def __len__(self) -> int:
        """The numbers counted against the bound."""
        return self._entries

    def values(self, key: Hashable, now: float) -> dict[str, int]:
        """Node name -> the number kept for ``key`` as of ``now``; what is added to it is said to :meth:`added`."""
        if now < self._latest:
            self.clear()
        self._latest = now
        known, added = self._by_key.pop(key, None), self._added.pop(key, 0)
        while self._by_key and (self._entries > self._max_entries or len(self._by_key) >= self._max_keys):
            oldest = next(iter(self._by_key))
            del self._by_key[oldest]
            self._entries -= self._added.pop(oldest)
        self._by_key[key] = known = {} if known is None else known  # the most recently used last
        self._added[key] = added
        return known

    def added(self, key: Hashable, count: int) -> None:
        """``count`` numbers were added to the dict :meth:`values` returned for ``key``."""
        self._added[key] += count
        self._entries += count

    def forget(self, name: str) -> None:
        """The node's state changed: its numbers are stale."""
        for known in self._by_key.values():
            known.pop(name, None)

    def clear(self) -> None:
        self._by_key, self._added, self._entries = {}, {}, 0


class StateTable:
    """Node name -> published state, written on the loop; ``bitstream_known`` is safe from the webhook's thread."""

    def __init__(self, max_nodes: int = MAX_NODES, max_bytes: int = MAX_STATE_BYTES) -> None:
        #: Node name -> published state (read on every call: a plain attribute).
        self.nodes: dict[str, NodeSlots] = {}
        #: What the scorer computed from these states (``agent.extender.ranking``), kept while they last.
        self.memo = NodeMemo()
        self._max_nodes = max_nodes
        self._max_bytes = max_bytes
        self._bytes = 0
        self._declared: dict[str, str] = {}
        #: Declared bitstream -> what it is an image for (``slot``, ``card``), for admission.
        self._scopes: dict[str, str] = {}
        #: Bitstream -> nodes whose own catalog holds it (for admission; kept with every change).
        self._holders: dict[str, int] = {}
        #: True once the first list arrived (and from then on, also while relisting).
        self.synced = False
        self._declarations_listed = False
        self._declarations_failing = False
        self._full_said = False

    # --- the feed -------------------------------------------------------------------------
    def replace(self, states: Mapping[str, NodeSlots | None]) -> None:
        """A list of every node: name -> its state (None: no usable state)."""
        self.nodes, self._holders, self._bytes = {}, {}, 0
        self.memo.clear()
        for name, state in states.items():
            self._put(name, state)
        if not self.synced:
            self.synced = True
            logger.info("node cache synced: %d nodes with published slot state", len(self.nodes))

    def apply(self, name: str, state: NodeSlots | None, *, deleted: bool = False) -> None:
        """One node's new state (None: none usable), or the node gone (``deleted``)."""
        self._drop(name)
        if not deleted:
            self._put(name, state)

    def replace_watched(self, nodes: Iterable[WatchedNode]) -> None:
        self.replace({node.name: node.state for node in nodes})

    def apply_watched(self, kind: str, node: WatchedNode) -> None:
        self.apply(node.name, node.state, deleted=kind == "DELETED")

    def failed(self, text: str) -> None:
        """Listing the nodes failed (the watch says so): the states last listed are served meanwhile."""

    def _put(self, name: str, state: NodeSlots | None) -> None:
        if state is not None and (len(self.nodes) >= self._max_nodes or self._bytes + state.weight > self._max_bytes):
            if not self._full_said:
                logger.warning(
                    "state table full (%d nodes): %s and later ones score neutral", len(self.nodes), name[:256]
                )
            self._full_said = True
            state = None
        if state is None:
            return
        state = state.declaring(self._declared)
        self.nodes[name] = state
        self._bytes += state.weight
        holders = self._holders
        for bitstream in state.catalog:
            holders[bitstream] = holders.get(bitstream, 0) + 1

    def _drop(self, name: str) -> None:
        state = self.nodes.pop(name, None)
        if state is None:
            return
        self.memo.forget(name)
        self._bytes -= state.weight
        holders = self._holders
        for bitstream in state.catalog:
            left = holders.get(bitstream, 0) - 1
            if left > 0:
                holders[bitstream] = left
            else:
                holders.pop(bitstream, None)

    # --- declared bitstreams (FpgaBitstream objects) --------------------------------------
    @property
    def bitstreams_listed(self) -> bool:
        """True once the nodes and the FpgaBitstream objects have both been listed (admission's check)."""
        return self.synced and self._declarations_listed

    def bitstream_known(self, name: str) -> bool:
        """Whether an FpgaBitstream declares ``name`` or some node's catalog holds it (two dict lookups)."""
        return name in self._declared or name in self._holders

    def bitstream_scope(self, name: str) -> str | None:
        """What the FpgaBitstream ``name`` declares an image for (``slot``, ``card``); None when undeclared."""
        return self._scopes.get(name)

    def set_declared(self, declared: Mapping[str, str], scopes: Mapping[str, str] | None = None) -> None:
        """The declared bitstreams (name -> platform), pullable by nodes lacking them, and scopes (unnamed: slot)."""
        if len(declared) > MAX_DECLARED:
            logger.warning("%d FpgaBitstream objects: only the first %d are read", len(declared), MAX_DECLARED)
            declared = dict(list(declared.items())[:MAX_DECLARED])
        self._scopes = {name: scope for name, scope in (scopes or {}).items() if name in declared}
        if dict(declared) == self._declared:
            return
        self._declared = dict(declared)
        self.nodes = {name: state.declaring(self._declared) for name, state in self.nodes.items()}
        self.memo.clear()
        logger.info("declared bitstreams: %d, pullable by nodes that lack them", len(self._declared))

    def replace_declared(self, declarations: Iterable[DeclaredBitstream]) -> None:
        """A list of the FpgaBitstream objects."""
        listed = list(declarations)
        declared = {d.name: d.platform for d in listed}
        if self._declarations_failing or not self._declarations_listed:
            logger.info("FpgaBitstream objects listed: %d", len(declared))
        self._declarations_failing = False
        self._declarations_listed = True
        self.set_declared(declared, {d.name: d.scope for d in listed})

    def apply_declared(self, kind: str, declaration: DeclaredBitstream) -> None:
        """One FpgaBitstream event (ADDED, MODIFIED, DELETED)."""
        declared, scopes = dict(self._declared), dict(self._scopes)
        if kind == "DELETED":
            declared.pop(declaration.name, None)
        else:
            declared[declaration.name] = declaration.platform
            scopes[declaration.name] = declaration.scope
        self.set_declared(declared, scopes)

    def declarations_failed(self, text: str) -> None:
        """Listing FpgaBitstream objects failed: said once per outage."""
        if not self._declarations_failing:
            logger.warning("FpgaBitstream objects not listed (%s): only the nodes' own catalogs count", text)
        self._declarations_failing = True
