"""In-process stand-ins for the kubelet's device manager and pod-resources API, its DRA side, and the API server.

Used by ``fpga-agent demo`` and by the tests; they speak the real protocols over real
unix sockets (HTTP for the API server, :mod:`agent.kubeletsim.kubeapi`) and behave as
the kubelet does (see :mod:`agent.kubeletsim.kubelet` and :mod:`agent.kubeletsim.drakubelet`).
"""

from agent.kubeletsim.apiserver import NodePods, PostedEvent, StandInPod
from agent.kubeletsim.drakubelet import DraKubelet
from agent.kubeletsim.kubelet import AdmittedContainer, KubeletStandIn, PluginConnection

__all__ = [
    "AdmittedContainer",
    "DraKubelet",
    "KubeletStandIn",
    "NodePods",
    "PluginConnection",
    "PostedEvent",
    "StandInPod",
]
