"""What the fake API server checks of an FpgaNodeState, as the CRD's schema (daemonset/fpganodestate-crd.yaml) does."""

from __future__ import annotations

import copy

from agent.demo.kubeapi.objects import _DNS_SUBDOMAIN, JSON, ApiError
from agent.slots.published import MAX_BITSTREAMS, MAX_SLOTS


def valid_node_state(body: object, namespace: str) -> JSON:
    """An FpgaNodeState as the CRD's schema admits it (its shape; the agent's schema module checks the rest)."""
    if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
        raise ApiError(400, "the body is not an object with metadata", "BadRequest")
    obj = copy.deepcopy(body)
    meta = obj["metadata"]
    name = meta.get("name")
    if not isinstance(name, str) or not _DNS_SUBDOMAIN.match(name) or len(name) > 253:
        raise ApiError(422, f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain must be given")
    if meta.setdefault("namespace", namespace) != namespace:
        raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
    spec = obj.get("spec")
    if (
        not isinstance(spec, dict)
        or not isinstance(spec.get("slots"), list)
        or not isinstance(spec.get("bitstreams"), dict)
    ):
        raise ApiError(422, "spec: Required value: spec.slots (a list) and spec.bitstreams (an object)")
    if len(spec["slots"]) > MAX_SLOTS or len(spec["bitstreams"]) > MAX_BITSTREAMS:
        raise ApiError(422, f"spec: Too many: spec.slots at most {MAX_SLOTS}, spec.bitstreams at most {MAX_BITSTREAMS}")
    return obj
