"""``fpga-agent cluster``: the slot map of the whole cluster, from the FpgaNodeState objects the agents publish.

The objects and the Nodes are listed once; the agents are never asked. A node without an object shows
only with ``--all``; a malformed object shows as one error row, the others as usual.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agent.kube.nodefields import as_mapping
from agent.kube.nodes import NodeSummary
from agent.slots.published import PublishedSlot, parse_state

NO_STATE = "no published state"
TABLE_COLUMNS = ["node", "slot", "platform", "bitstream", "state", "health"]
#: ``--files``: which bitstream files each node holds (loaded or not), so which need no download there.
FILE_COLUMNS = ["node", "files", "bitstreams"]
#: ``--claims``: what each DRA claim's slots hold, from the data the agents write to its status.devices.
CLAIM_COLUMNS = ["claim", "node", "device", "bitstream", "sha256", "loaded", "programmed", "ready"]
DRIVER = "fpga.example.com"


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node as the cluster view shows it."""

    name: str
    #: Whether the node has an FpgaNodeState at all.
    published: bool
    slots: list[PublishedSlot] = field(default_factory=list)
    bitstreams: dict[str, str] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def node_view(name: str, state: Mapping[str, Any] | None, labels: Mapping[str, str]) -> NodeView:
    """Parse one node's FpgaNodeState (None: it has none); problems become errors of the view, never exceptions."""
    if state is None:
        return NodeView(name, False, labels=dict(labels))
    try:
        parsed = parse_state(state)
    except ValueError as exc:
        return NodeView(name, True, labels=dict(labels), errors=[f"malformed FpgaNodeState: {exc}"])
    return NodeView(name, True, list(parsed.slots), dict(parsed.bitstreams), dict(labels))


def cluster_views(
    nodes: Sequence[NodeSummary], states: Sequence[Mapping[str, Any]], *, include_unpublished: bool
) -> list[NodeView]:
    """A view per node (and per object whose Node is gone), sorted by name; nodes without state only if asked."""
    named = ((as_mapping(state.get("metadata")).get("name"), state) for state in states)
    by_name = {name: state for name, state in named if isinstance(name, str) and name}
    labels = {node.name: node.labels for node in nodes}
    names = sorted(set(by_name) | set(labels))
    views = [node_view(name, by_name.get(name), labels.get(name, {})) for name in names]
    return [view for view in views if view.published or include_unpublished]


def table_rows(views: Sequence[NodeView]) -> list[dict[str, object]]:
    """One row per slot, one per error, one per node without published state (``note`` says which)."""
    rows: list[dict[str, object]] = []
    for view in views:
        if not view.published:
            rows.append({"node": view.name, "note": NO_STATE})
        for slot in view.slots:
            rows.append(
                {
                    "node": view.name,
                    "slot": slot["id"],
                    "platform": slot["platform"],
                    # the catalog name loaded; an accelerator the node's catalog does not name, in parentheses
                    "bitstream": slot["bitstream"] or (f"({slot['accelerator']})" if slot["accelerator"] else None),
                    "state": "free" if slot["free"] else "held",
                    "health": "healthy" if slot["healthy"] else "unhealthy",
                }
            )
        for error in view.errors:
            rows.append({"node": view.name, "state": "error", "note": error})
    return rows


def file_rows(views: Sequence[NodeView]) -> list[dict[str, object]]:
    """One row per node: how many bitstream files its catalog holds and their names (sorted)."""
    names = [(view.name, sorted(view.bitstreams or {})) for view in views]
    return [{"node": node, "files": len(files), "bitstreams": ", ".join(files) or None} for node, files in names]


def json_document(views: Sequence[NodeView]) -> dict[str, Any]:
    """The same data as the table, as ``--json`` prints it."""
    return {"nodes": [asdict(view) for view in views]}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def claim_rows(claims: Sequence[Mapping[str, Any]]) -> list[dict[str, object]]:
    """One row per device entry of our driver in each claim's status (sorted by claim, then device)."""
    rows: list[dict[str, object]] = []
    for claim in claims:
        metadata = as_mapping(claim.get("metadata"))
        for entry in _list(as_mapping(claim.get("status")).get("devices")):
            if not isinstance(entry, Mapping) or entry.get("driver") != DRIVER:
                continue
            data = as_mapping(entry.get("data"))
            verdicts = [
                f"{str(c.get('type', '')).rpartition('/')[2]}={c.get('status')}"
                for c in _list(entry.get("conditions"))
                if isinstance(c, Mapping)
            ]
            hit = data.get("cacheHit")
            rows.append(
                {
                    "claim": f"{metadata.get('namespace', '')}/{metadata.get('name', '')}",
                    "node": _text(entry.get("pool")),
                    "device": _text(entry.get("device")),
                    "bitstream": _text(data.get("bitstream")),
                    "sha256": (_text(data.get("sha256")) or "")[:12] or None,
                    "loaded": None if hit is None else "cache hit" if hit else "programmed",
                    "programmed": _text(data.get("programmedAt")),
                    "ready": ", ".join(verdicts) or None,
                }
            )
    return sorted(rows, key=lambda row: (str(row["claim"]), str(row["device"])))
