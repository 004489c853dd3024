"""In-process stand-ins for the kubelet's device manager and pod-resources API, its DRA side, and the API server.

Used by ``fpga-agent demo`` and by the tests; they speak the real protocols over real
unix sockets (HTTP for the API server, :mod:`agent.demo.kubeapi`) and behave as
the kubelet does (see :mod:`agent.demo.kubelet.devicemanager` and :mod:`agent.demo.kubelet.dra`).
"""

from agent.demo.kubelet.devicemanager import AdmittedContainer, KubeletStandIn, PluginConnection
from agent.demo.kubelet.dra import DraKubelet
from agent.demo.kubelet.nodepods import NodePods, PostedEvent, StandInPod

__all__ = [
    "AdmittedContainer",
    "DraKubelet",
    "KubeletStandIn",
    "NodePods",
    "PluginConnection",
    "PostedEvent",
    "StandInPod",
]
