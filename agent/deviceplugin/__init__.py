"""The kubelet device-plugin protocol (v1beta1): the RPCs (``servicer``), serving and registering
(``lifecycle``), and which pod holds which slot (``podresources``)."""

from agent.deviceplugin.constants import RESOURCE_NAME
from agent.deviceplugin.lifecycle import PluginLifecycle
from agent.deviceplugin.podresources import ContainerRef, PodResourcesClient
from agent.deviceplugin.servicer import DevicePluginServicer

__all__ = [
    "RESOURCE_NAME",
    "ContainerRef",
    "DevicePluginServicer",
    "PluginLifecycle",
    "PodResourcesClient",
]
