"""The keys of a Node that belong to the agent: its platform labels, and the annotations earlier versions kept.

What they are called, which of a Node's keys are owned, and the merge patches that set or remove them:
one place for the publisher (:mod:`agent.kube.nodes`), the uninstall and the cluster view.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any

#: The platform of the node's slots when they all share one.
PLATFORM_LABEL = "example.com/fpga-platform"
#: ``fpga-platform.example.com/<platform>: "true"`` for every platform the node's slots have.
PLATFORM_LABEL_PREFIX = "fpga-platform.example.com/"
#: Slot state annotations that versions before the FpgaNodeState object wrote on the Node: removed when seen.
LEGACY_ANNOTATIONS: frozenset[str] = frozenset(
    ("example.com/fpga-slots", "example.com/fpga-bitstreams", "example.com/fpga-agent-heartbeat")
)


MAX_LABEL_LEN = 63
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def is_label_name(text: str) -> bool:
    """Whether ``text`` is valid both as a label value and as the name part of a label key."""
    return len(text) <= MAX_LABEL_LEN and _LABEL_NAME.fullmatch(text) is not None


def platform_labels(platforms: Set[str]) -> dict[str, str]:
    """The labels the agent wants for these platforms; platforms that cannot be labels get none."""
    valid = sorted(p for p in platforms if is_label_name(p))
    labels = {PLATFORM_LABEL_PREFIX + p: "true" for p in valid}
    if len(platforms) == 1 and valid:
        labels[PLATFORM_LABEL] = valid[0]
    return labels


def is_owned_label(key: str) -> bool:
    return key == PLATFORM_LABEL or key.startswith(PLATFORM_LABEL_PREFIX)


@dataclass(frozen=True, slots=True)
class OwnedFields:
    """The annotations and labels of a Node that belong to the agent, as they are or as wanted."""

    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


def owned_fields(node: Mapping[str, Any]) -> OwnedFields:
    """The owned keys of a Node as the API sends it (JSON); everything else is left out."""
    meta = as_mapping(node.get("metadata"))
    annotations = {
        str(k): str(v)
        for k, v in as_mapping(meta.get("annotations")).items()
        if k in LEGACY_ANNOTATIONS and v is not None
    }
    labels = {str(k): str(v) for k, v in as_mapping(meta.get("labels")).items() if is_owned_label(str(k))}
    return OwnedFields(annotations, labels)


def patch_body(desired: OwnedFields, current: OwnedFields) -> dict[str, Any] | None:
    """The merge patch of the owned keys that differ from ``current`` to ``desired`` (``null``: removed); None
    if equal."""
    parts = {
        "annotations": _changes(desired.annotations, current.annotations),
        "labels": _changes(desired.labels, current.labels),
    }
    metadata = {key: changes for key, changes in parts.items() if changes}
    return {"metadata": metadata} if metadata else None


def _changes(desired: Mapping[str, str], current: Mapping[str, str]) -> dict[str, str | None]:
    changed: dict[str, str | None] = {key: value for key, value in desired.items() if current.get(key) != value}
    return changed | {key: None for key in current if key not in desired}


def keys_of(body: Mapping[str, Any]) -> list[str]:
    meta = as_mapping(body.get("metadata"))
    return [*as_mapping(meta.get("annotations")), *as_mapping(meta.get("labels"))]


def as_mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
