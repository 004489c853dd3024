"""The published slot state of every node, by name, for answering ``nodeCacheCapable`` calls.

With ``nodeCacheCapable: true`` kube-scheduler sends node names only, so the
extender keeps every node's state itself. A node watch (``agent.kube.nodewatch``,
wired by the app) lists and watches Nodes and calls :func:`parse_watched_node` in its
worker thread, once per node update; the parsed values reach :class:`NodeCache` on
the event loop, where the request handlers read them. Handlers never call the API
server: a name the cache does not know is a node without published state.

After a dropped watch or a ``410 Gone`` the watch lists again and :meth:`NodeCache.replace`
swaps the whole table; until then the last known state is served (stale rather than
absent: the agents keep publishing, and the next event puts it right).

:class:`RequestNodes` is the other mode (``nodeCacheCapable: false``): the state is
read from the Node objects in the request, memoised by name and resourceVersion so
that the same node is parsed once, not once per pod.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent.extender.nodestate import Derived, NodeSlots, read_node_slots
from agent.extender.wire import node_annotations, node_name, node_resource_version

logger = logging.getLogger(__name__)

#: Parsed Node objects from requests kept for reuse (cleared when full).
REQUEST_MEMO_SIZE = 20_000
#: Node changes remembered for the score tables; past it, a new generation (tables are built afresh).
CHANGE_LOG_LIMIT = 100_000


class DeclaredBitstream(Protocol):
    """What the extender reads of an FpgaBitstream (structurally: ``agent.bitstreams.Declaration``)."""

    @property
    def name(self) -> str: ...
    @property
    def platform(self) -> str: ...


class NodeMetadata(Protocol):
    """What a node watch hands over of each Node (structurally: ``agent.kube.nodewatch.NodeMeta``)."""

    @property
    def name(self) -> str: ...
    @property
    def resource_version(self) -> str: ...
    @property
    def annotations(self) -> Mapping[str, str]: ...


@dataclass(frozen=True, slots=True)
class WatchedNode:
    """A node from the watch: its name, and its published state or None."""

    name: str
    state: NodeSlots | None


def parse_watched_node(meta: NodeMetadata) -> WatchedNode:
    """Parse one watched Node (runs in the watch's worker thread, once per update)."""
    return WatchedNode(meta.name, read_node_slots(meta.name, meta.resource_version, meta.annotations))


class NodeCache:
    """Node name -> published state, replaced by lists and updated by watch events. Loop-only.

    For those who keep answers derived from the whole table (``agent.extender.ranking``):
    ``generation`` changes when the table is replaced, and ``changes`` lists, in order,
    the names updated or removed since.
    """

    def __init__(self) -> None:
        # Read on every scheduling call, so plain attributes (not properties); written only by this class.
        #: Node name -> published state.
        self.nodes: dict[str, NodeSlots] = {}
        #: Nodes the watch reported without usable published state (no agent, or its agent gone): they score
        #: neutral. A name the watch never reported is in neither.
        self.unpublished: set[str] = set()
        self._synced = False
        self._last_error: str | None = None
        #: Changes when the table is replaced.
        self.generation = 0
        #: The names updated or removed since, in order.
        self.changes: list[str] = []
        self._declared: dict[str, str] = {}
        self._derived: Derived = {}
        self._declarations_failing = False
        self._declarations_listed = False

    def get(self, name: str) -> NodeSlots | None:
        return self.nodes.get(name)

    def lookup(self) -> Callable[[str], NodeSlots | None]:
        """The lookup for one request: the current table's own ``get`` (a relist swaps the table)."""
        return self.nodes.get

    def __len__(self) -> int:
        """Nodes with published state."""
        return len(self.nodes)

    @property
    def synced(self) -> bool:
        """True once the first list arrived (and from then on, also while relisting)."""
        return self._synced

    @property
    def bitstreams_listed(self) -> bool:
        """True once the nodes and the FpgaBitstream objects have both been listed: from then on a bitstream
        that :meth:`bitstream_known` does not know is unknown in the cluster (the admission check)."""
        return self._synced and self._declarations_listed

    def bitstream_known(self, name: str) -> bool:
        """Whether an FpgaBitstream declares ``name`` or some node's published catalog holds it. One dict
        lookup per node at worst (an unknown name), no copy: cheap enough for admission, which is rare."""
        if name in self._declared:
            return True
        return any(name in state.catalog for state in self.nodes.values())

    @property
    def last_error(self) -> str | None:
        """Why the last list failed; None after a successful one."""
        return self._last_error

    # --- called on the loop by the node watch ------------------------------------------

    def replace(self, nodes: Iterable[WatchedNode]) -> None:
        declared = self._declared
        derived = self._derived
        published: dict[str, NodeSlots] = {}
        unpublished: set[str] = set()
        for node in nodes:
            if node.state is None:
                unpublished.add(node.name)
            else:
                published[node.name] = node.state.declaring(declared, derived)
        self.nodes, self.unpublished = published, unpublished
        self._new_generation()
        self._last_error = None
        if not self._synced:
            self._synced = True
            logger.info("node cache synced: %d nodes with published slot state", len(self.nodes))

    def apply(self, kind: str, node: WatchedNode) -> None:
        if kind == "DELETED":
            self.nodes.pop(node.name, None)
            self.unpublished.discard(node.name)
        elif node.state is None:
            self.nodes.pop(node.name, None)
            self.unpublished.add(node.name)
        else:
            self.nodes[node.name] = node.state.declaring(self._declared, self._derived)
            self.unpublished.discard(node.name)
        if len(self.changes) >= CHANGE_LOG_LIMIT:
            self._new_generation()
        else:
            self.changes.append(node.name)

    def expire(self, now: float) -> list[str]:
        """Drop the nodes whose agent is gone (heartbeat too old, :meth:`NodeSlots.stale`); their names."""
        gone = [name for name, state in self.nodes.items() if state.stale(now)]
        for name in gone:
            self.apply("MODIFIED", WatchedNode(name, None))  # the node is still there: it scores neutral
        if gone:
            logger.info("ignoring the slot state of %d node(s) whose agent is gone: %s", len(gone), ", ".join(gone[:8]))
        return gone

    def set_declared(self, declared: Mapping[str, str]) -> None:
        """The cluster's declared bitstreams (FpgaBitstream: name -> platform), which nodes can pull: every
        node's state is derived again and the score tables start afresh (declarations change rarely)."""
        if dict(declared) == self._declared:
            return
        self._declared = dict(declared)
        self._derived = {}
        self.nodes = {name: state.declaring(self._declared, self._derived) for name, state in self.nodes.items()}
        self._new_generation()
        logger.info("declared bitstreams: %d, pullable by nodes that lack them", len(self._declared))

    # --- called on the loop by the FpgaBitstream watch ----------------------------------

    def replace_declared(self, declarations: Iterable[DeclaredBitstream]) -> None:
        """A list of the FpgaBitstream objects: the declared bitstreams are these."""
        declared = {d.name: d.platform for d in declarations}
        if self._declarations_failing or not self._declarations_listed:
            logger.info("FpgaBitstream objects listed: %d", len(declared))
        self._declarations_failing = False
        self._declarations_listed = True
        self.set_declared(declared)

    def apply_declared(self, kind: str, declaration: DeclaredBitstream) -> None:
        """One FpgaBitstream event (ADDED, MODIFIED, DELETED)."""
        declared = dict(self._declared)
        if kind == "DELETED":
            declared.pop(declaration.name, None)
        else:
            declared[declaration.name] = declaration.platform
        self.set_declared(declared)

    def declarations_failed(self, text: str) -> None:
        """Listing FpgaBitstream objects failed: said once per outage (before the CRD is installed, say)."""
        if not self._declarations_failing:
            logger.warning("FpgaBitstream objects not listed (%s): only the nodes' own catalogs count", text)
        self._declarations_failing = True

    def _new_generation(self) -> None:
        self.generation += 1
        self.changes = []

    def failed(self, text: str) -> None:
        self._last_error = text


class RequestNodes:
    """Published state read from the Node objects of a request, each parsed once per resourceVersion."""

    def __init__(self, capacity: int = REQUEST_MEMO_SIZE) -> None:
        self._capacity = capacity
        self._memo: dict[tuple[str, str], NodeSlots | None] = {}

    def index(self, nodes: Sequence[Mapping[str, Any]]) -> dict[str, NodeSlots | None]:
        """Name -> state for these Node objects (the objects themselves are only read)."""
        found: dict[str, NodeSlots | None] = {}
        for node in nodes:
            name = node_name(node)
            version = node_resource_version(node)
            key = (name, version)
            if version and key in self._memo:
                known = self._memo[key]
                found[name] = None if known is not None and known.stale(time.time()) else known
                continue
            state = read_node_slots(name, version, node_annotations(node))
            if version:
                if len(self._memo) >= self._capacity:
                    self._memo.clear()
                self._memo[key] = state
            found[name] = state
        return found
