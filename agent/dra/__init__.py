"""The kubelet's DRA plugin protocol: registration through the plugin watcher and the DRAPlugin service.

What preparing a claim means (reading it, programming slots, writing CDI specs) is behind :class:`ClaimPreparer`.
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
