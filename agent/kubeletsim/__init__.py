"""An in-process stand-in for the kubelet's device manager and pod-resources API.

Used by ``fpga-agent demo`` and by the tests; it speaks the real protocol over real
unix sockets and behaves as the kubelet does (see :mod:`agent.kubeletsim.kubelet`).
"""

from agent.kubeletsim.apiserver import NodePods, PostedEvent, StandInPod
from agent.kubeletsim.kubelet import AdmittedContainer, KubeletStandIn, PluginConnection

__all__ = ["AdmittedContainer", "KubeletStandIn", "NodePods", "PluginConnection", "PostedEvent", "StandInPod"]
