"""The only code that talks to the API server (through the blocking ``kubernetes`` client).

Every call runs in a worker thread; results reach the event loop as small frozen values,
and client errors are wrapped (``KubeError``) or logged here.
"""

from agent.kube.bitstreamwatch import BitstreamWatcher
from agent.kube.claims import AllocatedDevice, ClaimInfo, ClaimReader, parse_claim
from agent.kube.client import KubeconfigChoice, build_api_client, command_api, connect_api, resolve_kubeconfig
from agent.kube.events import EventRecorder, EventType
from agent.kube.model import SLOT_RESOURCE, ContainerSlots, PodEventKind, PodInfo, parse_pod
from agent.kube.nodefields import PLATFORM_LABEL, PLATFORM_LABEL_PREFIX
from agent.kube.nodes import NodePublisher, NodeSummary, list_node_states, list_nodes, list_resource_claims
from agent.kube.pods import PodCache, PodListener
from agent.kube.reflector import Backoff
from agent.kube.resourceslices import ResourceSlicePublisher, SliceDevice
from agent.kube.secrets import SecretData, SecretReader, SecretWriter
from agent.kube.statewatch import NodeStateWatcher
from agent.kube.webhooks import WebhookCaBundle

__all__ = [
    "PLATFORM_LABEL",
    "PLATFORM_LABEL_PREFIX",
    "SLOT_RESOURCE",
    "AllocatedDevice",
    "Backoff",
    "BitstreamWatcher",
    "ClaimInfo",
    "ClaimReader",
    "ContainerSlots",
    "EventRecorder",
    "EventType",
    "KubeconfigChoice",
    "NodePublisher",
    "NodeStateWatcher",
    "NodeSummary",
    "PodCache",
    "PodEventKind",
    "PodInfo",
    "PodListener",
    "ResourceSlicePublisher",
    "SecretData",
    "SecretReader",
    "SecretWriter",
    "SliceDevice",
    "WebhookCaBundle",
    "build_api_client",
    "command_api",
    "connect_api",
    "list_node_states",
    "list_nodes",
    "list_resource_claims",
    "parse_claim",
    "parse_pod",
    "resolve_kubeconfig",
]
