"""What a pod asks of the slots, reduced to what filter and prioritize need.

Demand per bitstream is the most the pod holds at once: app containers together, init containers
one at a time. A DRA pod lists its claims' requests in allocation order instead (``PodDemand.dra``).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple


class DraRequest(NamedTuple):
    """One request of a DRA pod's claims: the bitstream, how many slots (or, ``whole_card``, whole cards)."""

    bitstream: str
    amount: int
    whole_card: bool = False


@dataclass(frozen=True, slots=True)
class ContainerDemand:
    """One container that asks for slots, and the bitstream it wants in them (None: any content)."""

    name: str
    slots: int
    bitstream: str | None
    init: bool = False


@dataclass(frozen=True, slots=True)
class PodDemand:
    """What the pod asks for, reduced to what filter and prioritize need (see the module docstring)."""

    pod: str
    containers: tuple[ContainerDemand, ...] = ()
    #: Bitstream -> the most slots holding it that the pod uses at once.
    by_bitstream: Mapping[str, int] = field(default_factory=dict)
    #: Slots the pod uses at once without naming a bitstream.
    unnamed: int = 0
    #: The bitstream when the pod asks for one slot holding it and nothing else: the common case, on a short path.
    one_slot: str | None = None
    #: A DRA pod's requests in allocation order; None for a pod asking for the extended resource.
    dra: tuple[DraRequest, ...] | None = None

    @property
    def requested(self) -> int:
        """Slots as NodeResourcesFit counts them: the app containers' sum, or the largest init container's."""
        app = sum(c.slots for c in self.containers if not c.init)
        return max([app, *(c.slots for c in self.containers if c.init)])

    @classmethod
    def of(cls, pod: str, containers: Iterable[ContainerDemand]) -> PodDemand:
        wanted = tuple(c for c in containers if c.slots > 0)
        if len(wanted) == 1 and (named := wanted[0].bitstream) is not None:  # the common pod: one container
            return cls(pod, wanted, {named: wanted[0].slots}, 0, named if wanted[0].slots == 1 else None)
        app: dict[str | None, int] = {}
        for c in wanted:
            if not c.init:
                app[c.bitstream] = app.get(c.bitstream, 0) + c.slots
        peak = dict(app)
        for c in wanted:
            if c.init:
                peak[c.bitstream] = max(peak.get(c.bitstream, 0), c.slots)
        unnamed = peak.pop(None, 0)
        by_bitstream = {name: count for name, count in peak.items() if name is not None}
        one_slot = next(iter(by_bitstream)) if list(by_bitstream.values()) == [1] and not unnamed else None
        return cls(pod, wanted, types.MappingProxyType(by_bitstream), unnamed, one_slot)

    @classmethod
    def of_claims(cls, pod: str, requests: Iterable[tuple[str, int] | DraRequest]) -> PodDemand:
        """A DRA pod's demand: its claims' requests (bitstream, slots or cards) in allocation order, held at once."""
        listed = tuple(DraRequest(*request) for request in requests if request[1] > 0)
        containers = [ContainerDemand(f"request-{index}", r.amount, r.bitstream) for index, r in enumerate(listed)]
        return dataclasses.replace(cls.of(pod, containers), dra=listed)
