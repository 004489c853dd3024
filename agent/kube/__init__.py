"""The only code that talks to the API server (through the ``kubernetes`` client).

* :func:`connect_api` (the kubeconfig as kubectl finds it, or the in-cluster account);
  :class:`PodCache` (this node's pods, one list+watch); :class:`EventRecorder` (Events on pods);
* :class:`NodePublisher`: this node's slot state as its FpgaNodeState and its platform labels,
  written only on change, debounced, retried; :func:`list_nodes`, :func:`list_node_states` for the
  cluster view; :class:`NodeStateWatcher`: every FpgaNodeState, for the scheduler extender;
* :class:`BitstreamWatcher`, :class:`SecretReader` (pull Secrets), :class:`SecretWriter` and
  :class:`WebhookCaBundle` (``fpga-agent certs``); for DRA :class:`ClaimReader`, :class:`ResourceSlicePublisher`.

The client is blocking: every call runs in a worker thread, results reach the event loop as
small frozen values, and client errors are wrapped (``KubeError``) or logged here.
"""

from agent.kube.bitstreamwatch import BitstreamWatcher
from agent.kube.claims import AllocatedDevice, ClaimInfo, ClaimReader, parse_claim
from agent.kube.client import KubeconfigChoice, build_api_client, command_api, connect_api, resolve_kubeconfig
from agent.kube.events import EventRecorder, EventType
from agent.kube.model import (
    SLOT_RESOURCE,
    ContainerSlots,
    PodEventKind,
    PodInfo,
    parse_pod,
)
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
