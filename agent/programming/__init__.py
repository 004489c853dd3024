"""Programmers: reconfigure a slot with a bitstream, one backend each; and the bitstream catalog."""

from agent.programming.base import FileProgrammer, Programmer
from agent.programming.catalog import Catalog, CatalogEntry, CatalogProblem, check_platform, validate_name
from agent.programming.command import CommandProgrammer
from agent.programming.dfl import DflProgrammer
from agent.programming.fpga_region import FpgaRegionProgrammer
from agent.programming.sim import SimProgrammer

__all__ = [
    "Catalog",
    "CatalogEntry",
    "CatalogProblem",
    "CommandProgrammer",
    "DflProgrammer",
    "FileProgrammer",
    "FpgaRegionProgrammer",
    "Programmer",
    "SimProgrammer",
    "check_platform",
    "validate_name",
]
