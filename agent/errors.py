"""The error tree of fpga-slot.

Library errors are wrapped once, where an adapter calls the library, and mapped to
gRPC status codes or HTTP errors only at the edge (the servicer, the CLI)::

    FpgaSlotError
    ├── ConfigError                  bad flag, env var or config file value (names the flag)
    ├── RequestError                 a kubelet request that is wrong in itself; changes nothing
    │   ├── UnknownSlotError         an ID this node does not advertise
    │   ├── DuplicateSlotError       the same ID twice in one request
    │   ├── UnhealthySlotError       an ID that is advertised Unhealthy
    │   └── AllocationSizeError      a preferred-allocation size that cannot be met
    ├── DiscoveryError               a backend could not enumerate or watch its devices
    ├── ProgrammingError             reconfiguring a slot failed (slot content now unknown)
    │   └── ProgrammingTimeout       reconfiguring a slot did not finish in time
    └── KubeletError                 the kubelet could not be reached or refused us
        └── RegistrationError        Register was refused or timed out
"""

from __future__ import annotations


class FpgaSlotError(Exception):
    """Base of every error fpga-slot raises on purpose."""


class ConfigError(FpgaSlotError):
    """A configuration value is invalid; the message names the flag and the source."""


class RequestError(FpgaSlotError):
    """A request is wrong in itself (bad IDs, impossible size); nothing was changed."""


class UnknownSlotError(RequestError):
    """A request names a slot ID this node does not advertise."""


class DuplicateSlotError(RequestError):
    """A request names the same slot ID more than once."""


class UnhealthySlotError(RequestError):
    """A request names a slot that is advertised Unhealthy."""


class AllocationSizeError(RequestError):
    """A preferred-allocation request whose size cannot be met from what it offers."""


class DiscoveryError(FpgaSlotError):
    """A discovery backend failed to enumerate or watch devices."""


class ProgrammingError(FpgaSlotError):
    """Reconfiguring a slot failed; the slot's content is unknown afterwards."""


class ProgrammingTimeout(ProgrammingError):
    """Reconfiguring a slot did not finish within its deadline."""


class KubeletError(FpgaSlotError):
    """The kubelet could not be reached or answered with an error."""


class RegistrationError(KubeletError):
    """The kubelet refused or did not answer our RegisterRequest."""
