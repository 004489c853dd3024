"""In-process stand-ins for the kubelet's device manager, pod-resources API and DRA side, over real unix sockets."""

from agent.demo.kubelet.devicemanager import KubeletStandIn, PluginConnection
from agent.demo.kubelet.dra import DraKubelet
from agent.demo.kubelet.nodepods import NodePods, PostedEvent

__all__ = [
    "DraKubelet",
    "KubeletStandIn",
    "NodePods",
    "PluginConnection",
    "PostedEvent",
]
