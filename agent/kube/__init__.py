"""The only code that talks to the API server (through the blocking ``kubernetes`` client).

Every call runs in a worker thread; results reach the event loop as small frozen values,
and client errors are wrapped (``KubeError``) or logged here.
"""

from agent.kube.claims import ClaimReader
from agent.kube.client import KubeconfigChoice, build_api_client, command_api, connect_api, resolve_kubeconfig
from agent.kube.events import EventRecorder
from agent.kube.nodefields import PLATFORM_LABEL, PLATFORM_LABEL_PREFIX
from agent.kube.nodes import NodePublisher, NodeSummary, list_node_states, list_nodes, list_resource_claims
from agent.kube.pods import SLOT_RESOURCE, ContainerSlots, PodCache, PodEventKind, PodInfo, parse_pod
from agent.kube.reflector import Backoff, BitstreamWatcher
from agent.kube.secrets import SecretReader, SecretWriter
from agent.kube.webhooks import fill_ca_bundle

__all__ = [
    "PLATFORM_LABEL",
    "PLATFORM_LABEL_PREFIX",
    "SLOT_RESOURCE",
    "Backoff",
    "BitstreamWatcher",
    "ClaimReader",
    "ContainerSlots",
    "EventRecorder",
    "KubeconfigChoice",
    "NodePublisher",
    "NodeSummary",
    "PodCache",
    "PodEventKind",
    "PodInfo",
    "SecretReader",
    "SecretWriter",
    "build_api_client",
    "command_api",
    "connect_api",
    "fill_ca_bundle",
    "list_node_states",
    "list_nodes",
    "list_resource_claims",
    "parse_pod",
    "resolve_kubeconfig",
]
