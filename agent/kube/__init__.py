"""The only code that talks to the API server (through the blocking ``kubernetes`` client).

Every call runs in a worker thread; results reach the event loop as small frozen values,
and client errors are wrapped (``KubeError``) or logged here.
"""

from agent.kube.client import command_api, connect_api
from agent.kube.events import EventRecorder
from agent.kube.nodes import NodePublisher, NodeSummary, list_node_states, list_nodes, list_resource_claims
from agent.kube.pods import PodCache, PodInfo
from agent.kube.reflector import Watcher
from agent.kube.secrets import SecretReader, SecretWriter
from agent.kube.webhooks import fill_ca_bundle

__all__ = [
    "EventRecorder",
    "NodePublisher",
    "NodeSummary",
    "PodCache",
    "PodInfo",
    "SecretReader",
    "SecretWriter",
    "Watcher",
    "command_api",
    "connect_api",
    "fill_ca_bundle",
    "list_node_states",
    "list_nodes",
    "list_resource_claims",
]
