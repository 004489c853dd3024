"""Programmers: reconfigure a slot with a bitstream, one backend each."""

from agent.programming.base import Programmer
from agent.programming.sim import SimProgrammer

__all__ = ["Programmer", "SimProgrammer"]
