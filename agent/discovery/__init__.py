"""Discovery backends: find the node's FPGA slots and keep their health current.

Each backend is a :class:`DeviceSource`. ``sim`` reads simulated cards; the
hardware backends (DFL, fpga_region, static) read sysfs through pyudev.
"""

from agent.discovery.base import DeviceSource, Enumeration, Skipped, SlotSink
from agent.discovery.sim import SimSource

__all__ = ["DeviceSource", "Enumeration", "SimSource", "Skipped", "SlotSink"]
