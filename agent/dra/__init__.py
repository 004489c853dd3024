"""The kubelet's DRA plugin protocol: registration through the plugin watcher and the DRAPlugin service.

The kubelet finds our registration socket in its plugin registry directory, asks
what we are (a ``DRAPlugin`` named after our driver, served on our DRA socket, API
``v1.DRAPlugin`` or ``v1beta1.DRAPlugin``) and then calls NodePrepareResources and
NodeUnprepareResources there. What preparing a claim means (reading the claim,
programming slots, writing CDI specs) is behind :class:`ClaimPreparer`.
"""

from agent.dra.constants import DRIVER_NAME, PLUGIN_TYPE, SUPPORTED_VERSIONS
from agent.dra.health import DeviceHealth, HealthBoard
from agent.dra.naming import NameClash, device_name, device_names
from agent.dra.server import DraPluginServer, PluginSockets
from agent.dra.service import ClaimPreparer, ClaimRef, PreparedDevice

__all__ = [
    "DRIVER_NAME",
    "PLUGIN_TYPE",
    "SUPPORTED_VERSIONS",
    "ClaimPreparer",
    "ClaimRef",
    "DeviceHealth",
    "DraPluginServer",
    "HealthBoard",
    "NameClash",
    "PluginSockets",
    "PreparedDevice",
    "device_name",
    "device_names",
]
