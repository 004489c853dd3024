"""The kubelet device-plugin protocol (v1beta1): RPC behaviour and socket lifecycle.

``servicer`` answers the five RPCs from the slot registry; ``lifecycle`` serves the
socket, registers with the kubelet, notices kubelet restarts and registers again;
``podresources`` asks the kubelet which pod holds which slot.
"""

from agent.deviceplugin.constants import API_VERSION, ENDPOINT, KUBELET_SOCKET, RESOURCE_NAME
from agent.deviceplugin.lifecycle import PluginLifecycle
from agent.deviceplugin.podresources import ContainerRef, PodResourcesClient
from agent.deviceplugin.servicer import DevicePluginServicer

__all__ = [
    "API_VERSION",
    "ENDPOINT",
    "KUBELET_SOCKET",
    "RESOURCE_NAME",
    "ContainerRef",
    "DevicePluginServicer",
    "PluginLifecycle",
    "PodResourcesClient",
]
