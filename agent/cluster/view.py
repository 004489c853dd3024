"""``fpga-agent cluster``: the slot map of the whole cluster, from what each agent published on its Node.

What an operator runs first when a pod waits: which node has which slots, what is
loaded where, what is free, what is unhealthy. It reads the Nodes once (one paged
list through :func:`agent.kube.list_nodes`) and never asks the agents themselves.

Nodes without the ``example.com/fpga-slots`` annotation (no agent, or an agent
that never reached the API server) are left out unless ``--all`` is given, where
each shows as one row saying "no published state". A malformed annotation never
stops the command: the node shows as one error row naming what is wrong, and the
other nodes are listed as usual.

It runs with an operator's credentials, found as kubectl finds them
(:func:`agent.kube.resolve_kubeconfig`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.kube import BITSTREAMS_ANNOTATION, SLOTS_ANNOTATION, NodeSummary
from agent.node.nodestate import PublishedSlot, parse_bitstreams, parse_slots

NO_STATE = "no published state"
TABLE_COLUMNS = ["node", "slot", "platform", "bitstream", "state", "health"]
#: ``--files``: which bitstream files each node holds (loaded or not), so which need no download there.
FILE_COLUMNS = ["node", "files", "bitstreams"]


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node as the cluster view shows it."""

    name: str
    #: Whether the node carries the slots annotation at all.
    published: bool
    slots: list[PublishedSlot] = field(default_factory=list)
    bitstreams: dict[str, str] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def node_view(node: NodeSummary) -> NodeView:
    """Parse one node's annotations; problems become errors of the view, never exceptions."""
    errors: list[str] = []
    slots: list[PublishedSlot] = []
    bitstreams: dict[str, str] | None = None
    raw_slots = node.annotations.get(SLOTS_ANNOTATION)
    if raw_slots is not None:
        try:
            slots = parse_slots(raw_slots)
        except ValueError as exc:
            errors.append(f"malformed {SLOTS_ANNOTATION} annotation: {exc}")
    raw_bitstreams = node.annotations.get(BITSTREAMS_ANNOTATION)
    if raw_bitstreams is not None:
        try:
            bitstreams = parse_bitstreams(raw_bitstreams)
        except ValueError as exc:
            errors.append(f"malformed {BITSTREAMS_ANNOTATION} annotation: {exc}")
    return NodeView(node.name, raw_slots is not None, slots, bitstreams, dict(node.labels), errors)


def cluster_views(nodes: Sequence[NodeSummary], *, include_unpublished: bool) -> list[NodeView]:
    """The views of ``nodes`` in their order; nodes without published state only if asked for."""
    views = [node_view(node) for node in nodes]
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
                    "bitstream": loaded_text(slot),
                    "state": "free" if slot["free"] else "held",
                    "health": "healthy" if slot["healthy"] else "unhealthy",
                }
            )
        for error in view.errors:
            rows.append({"node": view.name, "state": "error", "note": error})
    return rows


def file_rows(views: Sequence[NodeView]) -> list[dict[str, object]]:
    """One row per node: how many bitstream files its catalog holds and their names (sorted)."""
    rows: list[dict[str, object]] = []
    for view in views:
        names = sorted(view.bitstreams or {})
        rows.append({"node": view.name, "files": len(names), "bitstreams": ", ".join(names) or None})
    return rows


def loaded_text(slot: PublishedSlot) -> str | None:
    """The catalog name loaded; an accelerator the node's catalog does not name, in parentheses."""
    if slot["bitstream"]:
        return slot["bitstream"]
    if slot["accelerator"]:
        return f"({slot['accelerator']})"
    return None


def table_columns(rows: Sequence[dict[str, object]]) -> list[str]:
    """The table's columns: a ``note`` column only when some row has a note."""
    return [*TABLE_COLUMNS, "note"] if any(row.get("note") for row in rows) else list(TABLE_COLUMNS)


def json_document(views: Sequence[NodeView]) -> dict[str, Any]:
    """The same data as the table, as ``--json`` prints it."""
    return {
        "nodes": [
            {
                "name": view.name,
                "published": view.published,
                "slots": list(view.slots),
                "bitstreams": view.bitstreams,
                "labels": view.labels,
                "errors": list(view.errors),
            }
            for view in views
        ]
    }
