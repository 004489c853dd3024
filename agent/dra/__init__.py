"""The kubelet's DRA plugin protocol: registration and the DRAPlugin service over a :class:`ClaimPreparer`."""

from agent.dra.constants import DRIVER_NAME
from agent.dra.health import DeviceHealth, HealthBoard
from agent.dra.naming import NameClash, device_name, device_names
from agent.dra.server import DraPluginServer, PluginSockets
from agent.dra.service import ClaimPreparer, ClaimRef, PreparedDevice

__all__ = [
    "DRIVER_NAME",
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
