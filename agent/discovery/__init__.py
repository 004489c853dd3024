"""Discovery backends (each a :class:`DeviceSource`): find the node's FPGA slots and keep their health current."""

from agent.discovery.base import CompositeSource, DeviceSource, Enumeration
from agent.discovery.dfl import dfl_source
from agent.discovery.fpga_region import fpga_region_source
from agent.discovery.sim import SimSource
from agent.discovery.static import static_source

__all__ = [
    "CompositeSource",
    "DeviceSource",
    "Enumeration",
    "SimSource",
    "dfl_source",
    "fpga_region_source",
    "static_source",
]
