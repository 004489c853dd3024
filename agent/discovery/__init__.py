"""Discovery backends (each a :class:`DeviceSource`): find the node's FPGA slots and keep their health current."""

from agent.discovery.base import DeviceSource, Enumeration, Skipped, SlotSink
from agent.discovery.composite import CompositeSource
from agent.discovery.dfl import dfl_source
from agent.discovery.fpga_region import fpga_region_source
from agent.discovery.sim import SimSource
from agent.discovery.static import StaticSlotSpec, parse_static_slots, static_source

__all__ = [
    "CompositeSource",
    "DeviceSource",
    "Enumeration",
    "SimSource",
    "Skipped",
    "SlotSink",
    "StaticSlotSpec",
    "dfl_source",
    "fpga_region_source",
    "parse_static_slots",
    "static_source",
]
