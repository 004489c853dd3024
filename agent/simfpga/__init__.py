"""Simulated FPGA cards for the demo, the tests and nodes without FPGAs (standard library only)."""

from agent.simfpga.fabric import SimEvent, SimFabric, SimSlotInfo

__all__ = ["SimEvent", "SimFabric", "SimSlotInfo"]
