"""What a container given slots sees, whichever way it got them (device plugin or DRA)."""

from __future__ import annotations

from collections.abc import Sequence

from agent.slots.model import Slot


def container_env(slots: Sequence[Slot]) -> dict[str, str]:
    """``FPGA_SLOTS=<id>,<id>`` and, per slot in order, its ID, platform, device nodes and NUMA node."""
    envs = {"FPGA_SLOTS": ",".join(slot.id for slot in slots)}
    for index, slot in enumerate(slots):
        envs[f"FPGA_SLOT_{index}_ID"] = slot.id
        envs[f"FPGA_SLOT_{index}_PLATFORM"] = slot.platform
        envs[f"FPGA_SLOT_{index}_DEVICE"] = ",".join(node.container_path for node in slot.device_nodes)
        if slot.numa is not None:
            envs[f"FPGA_SLOT_{index}_NUMA"] = str(slot.numa)
    return envs
