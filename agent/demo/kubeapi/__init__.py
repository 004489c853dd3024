"""An API server stand-in at the HTTP level, for the real ``kubernetes`` client: ``fpga-agent demo dra`` runs
the agent against it, and the tests extend it (``tests/fakeapi.py``) with their controls.

It serves what the agent reads and writes, over real HTTP on 127.0.0.1 with a bearer token, with the
real server's behaviour where the agent depends on it: lists with resourceVersion, field and label
selectors and pages; chunked watch streams (synthetic ADDED events, replay from a resourceVersion,
410 Expired once compacted, BOOKMARKs, ``timeoutSeconds``); strategic and JSON merge patches and
JSON patches of pods and nodes; ResourceSlices, FpgaNodeStates and Events created and validated as
the real server does; errors as ``Status`` objects. Not emulated: ``sendInitialEvents``, server-side
apply, ``$patch`` directives, TLS. docs/development.md lists the paths.
"""

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
