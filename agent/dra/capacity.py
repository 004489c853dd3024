"""Capacities a slot's device publishes, so that a claim can ask for a slot, or for a bitstream, without CEL.

The scheduler's allocator runs a claim's CEL selectors on every free device of every
node it filters, building the device's attributes anew for each evaluation; a request's
``capacity.requests`` it checks in Go, as a map lookup (DRAConsumableCapacity, beta and
on by default in Kubernetes 1.35+). So every device publishes

* ``fpga.example.com/slot: 1``: a request of the selector-less class ``fpga-slot-cached``
  that asks for it can only get one of our slots;
* ``fpga.example.com/bs_<bitstream, escaped>: 1`` while its slot holds that bitstream: the
  ``cached`` alternative of a cache-aware claim asks for it, and gets a free slot that
  already holds the bitstream where the node has one (``daemonset/examples/dra/cached-first.yaml``).

Capacity names are C identifiers of at most 32 characters, so the bitstream name is
escaped (``_`` -> ``__``, ``-`` -> ``_d``, ``.`` -> ``_p``: one name, one key, and the
admission policy ``daemonset/dra-mode/cached-class-policy.yaml`` works the key out the same way
in CEL); a name whose key would be longer has none (claims for it select with CEL).
Nothing is consumed: a slot goes to one claim at a time, as before.
"""

from __future__ import annotations

from agent.dra.constants import DRIVER_NAME

#: The capacity every slot's device has.
SLOT_CAPACITY = f"{DRIVER_NAME}/slot"
#: The start of a bitstream's capacity name (after the driver's domain).
BITSTREAM_PREFIX = "bs_"
#: The longest capacity name (the part after the domain): a C identifier of at most 32 characters.
MAX_IDENTIFIER = 32


def bitstream_capacity(bitstream: str) -> str | None:
    """``fpga.example.com/bs_<escaped name>``, the capacity a slot holding ``bitstream`` publishes; None when
    the name escaped is too long for one."""
    identifier = BITSTREAM_PREFIX + bitstream.replace("_", "__").replace("-", "_d").replace(".", "_p")
    if len(identifier) > MAX_IDENTIFIER:
        return None
    return f"{DRIVER_NAME}/{identifier}"
