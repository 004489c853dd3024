"""Programmers: reconfigure a slot with a bitstream, one backend each; and the bitstream catalog."""

from agent.programming.base import Programmer
from agent.programming.catalog import Catalog
from agent.programming.command import CommandProgrammer
from agent.programming.dfl import DflProgrammer
from agent.programming.fpga_region import FpgaRegionProgrammer
from agent.programming.sim import SimProgrammer

__all__ = [
    "Catalog",
    "CommandProgrammer",
    "DflProgrammer",
    "FpgaRegionProgrammer",
    "Programmer",
    "SimProgrammer",
]
