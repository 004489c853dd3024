"""Capacities a slot's device publishes, so that a claim can ask for a slot, or for a bitstream, without CEL
(docs/dra.md, "What a slot publishes")."""

from __future__ import annotations

from agent.dra.constants import DRIVER_NAME

#: The capacity every slot's device has.
SLOT_CAPACITY = f"{DRIVER_NAME}/slot"
#: The start of a bitstream's capacity name (after the driver's domain).
BITSTREAM_PREFIX = "bs_"
#: The longest capacity name (the part after the domain): a C identifier of at most 32 characters.
MAX_IDENTIFIER = 32


def bitstream_capacity(bitstream: str) -> str | None:
    """``fpga.example.com/bs_<name as a C identifier>`` (escaped as the admission policy does); None: too long."""
    identifier = BITSTREAM_PREFIX + bitstream.replace("_", "__").replace("-", "_d").replace(".", "_p")
    if len(identifier) > MAX_IDENTIFIER:
        return None
    return f"{DRIVER_NAME}/{identifier}"
