"""The interfaces every programmer implements."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from agent.slots.model import Slot


class Programmer(Protocol):
    """Reconfigures slots of one backend."""

    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        """Load ``image`` into ``slot``; the seconds the hardware took. ProgrammingTimeout past ``timeout_s``,
        ProgrammingError otherwise; after either the slot's content is unknown."""


@runtime_checkable
class FileProgrammer(Programmer, Protocol):
    """A programmer that hands a vendor tool the catalog's verified file (whole, GBS header included)."""

    def can_program(self, slot: Slot) -> bool:
        """Whether this programmer is configured for ``slot`` (a request for another is refused up front)."""

    async def program_file(self, slot: Slot, image_file: Path, accelerator_id: str, timeout_s: float) -> float:
        """Load the file ``image_file`` into ``slot``; as :meth:`Programmer.program` otherwise."""


@runtime_checkable
class CardProgrammer(Programmer, Protocol):
    """A programmer that can also load one image into a whole card (all of its slots as one region)."""

    def can_program_card(self, slots: Sequence[Slot]) -> bool:
        """Whether ``slots``, every slot of one card, can be programmed as the whole card."""

    async def program_card(self, slots: Sequence[Slot], image: bytes, accelerator_id: str, timeout_s: float) -> float:
        """Load ``image`` into the card of ``slots``; as :meth:`Programmer.program` otherwise."""
