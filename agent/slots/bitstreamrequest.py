"""Which bitstream a pod, a container or a DRA claim config asks for, read one way by the admission
webhook and the agent (docs/dra.md, the admission table). Standard library only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.slots.quantity import parse_count

#: The pod's bitstream; ``<BITSTREAM_ANNOTATION>.<container>`` overrides it for one container.
BITSTREAM_ANNOTATION = "example.com/fpga-bitstream"
#: The bitstream in a DRA claim's opaque config parameters.
BITSTREAM_PARAMETER = "bitstream"
#: The extended resource a container asks slots by.
SLOT_RESOURCE = "example.com/fpga-slot"
#: Containers (and init containers) read from a pod at most; the API server allows far fewer in practice.
MAX_CONTAINERS = 256


def container_bitstream(annotations: Mapping[str, object], container: str) -> tuple[str, object] | None:
    """(annotation key, value) a container asks for: its own annotation, else the pod's; None when unset or empty."""
    key = f"{BITSTREAM_ANNOTATION}.{container}"
    value = annotations.get(key)
    return pod_bitstream(annotations) if value is None or value == "" else (key, value)


def pod_bitstream(annotations: Mapping[str, object]) -> tuple[str, object] | None:
    """(annotation key, value) of the pod's own annotation, which a claim not made for a container reads."""
    value = annotations.get(BITSTREAM_ANNOTATION)
    return None if value is None or value == "" else (BITSTREAM_ANNOTATION, value)


def claim_bitstream(parameters: Mapping[str, Any]) -> object | None:
    """The bitstream a claim config's parameters name; None when absent or null (no bitstream)."""
    return parameters.get(BITSTREAM_PARAMETER)


def slots_asked(container: object) -> int:
    """The slots a container asks for: its limit of :data:`SLOT_RESOURCE`, else its request; 0 for none or no count."""
    resources = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(resources, Mapping):
        return 0
    limits, requests = resources.get("limits"), resources.get("requests")
    raw = limits.get(SLOT_RESOURCE) if isinstance(limits, Mapping) else None
    if raw is None and isinstance(requests, Mapping):
        raw = requests.get(SLOT_RESOURCE)
    try:
        return parse_count(raw) if raw is not None else 0
    except ValueError:
        return 0


def pod_spec_bitstreams(pod: Mapping[str, Any]) -> list[tuple[str, object]]:
    """(annotation key, value) of every bitstream annotation the agent reads for a pod object as the API server
    sends it, once each: those of the containers asking for slots, and with resource claims the pod's own (shapes
    it does not know: nothing)."""
    metadata, spec = pod.get("metadata"), pod.get("spec")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(annotations, Mapping) or not isinstance(spec, Mapping):
        return []
    asked: list[tuple[str, object] | None] = []
    for field in ("initContainers", "containers"):
        listed = spec.get(field)
        for container in listed[:MAX_CONTAINERS] if isinstance(listed, list) else ():
            name = container.get("name") if isinstance(container, Mapping) else None
            if isinstance(name, str) and slots_asked(container) > 0:
                asked.append(container_bitstream(annotations, name))
    claims = spec.get("resourceClaims")
    if isinstance(claims, list) and len(claims) > 0:
        asked.append(pod_bitstream(annotations))
    found: dict[str, object] = {}
    for key, value in filter(None, asked):
        found.setdefault(key, value)
    return list(found.items())
