"""The only code that talks to the API server (through the ``kubernetes`` client).

* :func:`connect_api`: the kubeconfig found as kubectl finds it (:func:`resolve_kubeconfig`), or the
  in-cluster service account; :func:`build_api_client` for a given file;
* :class:`PodCache`: this node's pods (annotations, slot requests, phase) from one
  list+watch, with change callbacks for deletion-driven reconciling;
* :class:`EventRecorder`: Events on pods, queued and posted without blocking the caller;
* :class:`NodePublisher`: this node's slot state as annotations and labels on its Node,
  patched only on change, debounced, retried; :func:`list_nodes` for the cluster view;
* :class:`BitstreamWatcher`: the FpgaBitstream objects the cluster declares (list+watch);
  :class:`SecretReader`: the pull Secrets they name, in the agent's own namespace;
  :class:`SecretWriter`: the extender's TLS Secrets, made once at install (``fpga-agent certs``);
  :class:`WebhookCaBundle`: the install's CA in the admission webhook's caBundle (``fpga-agent certs``);
* for DRA: :class:`ClaimReader` (a ResourceClaim's allocation and configs for one
  driver) and :class:`ResourceSlicePublisher` (this node's devices as a ResourceSlice).

The client is blocking, so every call runs in a worker thread; results reach the
event loop as small frozen values (:class:`PodInfo`). Client errors are wrapped
here (``KubeError``) or logged here, never passed on as library exceptions.
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
from agent.kube.nodefields import (
    BITSTREAMS_ANNOTATION,
    HEARTBEAT_ANNOTATION,
    PLATFORM_LABEL,
    PLATFORM_LABEL_PREFIX,
    SLOTS_ANNOTATION,
)
from agent.kube.nodes import NodePublisher, NodeSummary, list_nodes
from agent.kube.pods import PodCache, PodListener
from agent.kube.reflector import Backoff
from agent.kube.resourceslices import ResourceSlicePublisher, SliceDevice
from agent.kube.secrets import SecretData, SecretReader, SecretWriter
from agent.kube.webhooks import WebhookCaBundle

__all__ = [
    "BITSTREAMS_ANNOTATION",
    "HEARTBEAT_ANNOTATION",
    "PLATFORM_LABEL",
    "PLATFORM_LABEL_PREFIX",
    "SLOTS_ANNOTATION",
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
    "list_nodes",
    "parse_claim",
    "parse_pod",
    "resolve_kubeconfig",
]
