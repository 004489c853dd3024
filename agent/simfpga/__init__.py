"""Simulated FPGA cards: hardware for the demo, the tests and nodes without FPGAs.

Shared by the ``sim`` discovery backend (which reads and watches it, as udev would
report real cards) and the ``sim`` programmer (which reconfigures it, as an FME
ioctl would). Standard library only.
"""

from agent.simfpga.fabric import SimEvent, SimFabric, SimSlotInfo

__all__ = ["SimEvent", "SimFabric", "SimSlotInfo"]
