"""An API server stand-in at the HTTP level, for the real ``kubernetes`` client: ``fpga-agent demo dra`` runs
the agent against it, and the tests extend it (``tests/fakeapi.py``).

It behaves as the real server in what the agent sends it: lists, watches, field selectors, merge patches;
the tests' server adds label selectors, the other patch types and the real server's checks of slices and Events.
Not emulated: ``sendInitialEvents``, server-side apply, TLS."""

from __future__ import annotations

from agent.demo.kubeapi.objects import (
    DEFAULT_NODE,
    JSON,
    RESOURCE_API,
    SLOT_RESOURCE,
    ApiError,
    make_node,
    make_pod,
    make_resource_claim,
    now_rfc3339,
    status_object,
)
from agent.demo.kubeapi.server import KubeApiStandIn
from agent.demo.kubeapi.store import RecordedRequest

__all__ = [
    "DEFAULT_NODE",
    "JSON",
    "RESOURCE_API",
    "SLOT_RESOURCE",
    "ApiError",
    "KubeApiStandIn",
    "RecordedRequest",
    "make_node",
    "make_pod",
    "make_resource_claim",
    "now_rfc3339",
    "status_object",
]
