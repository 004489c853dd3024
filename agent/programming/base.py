"""The interfaces every programmer implements."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from agent.slots import Slot


class Programmer(Protocol):
    """Reconfigures slots of one backend."""

    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        """Load ``image`` into ``slot``; return the seconds the hardware took.

        Raises ProgrammingTimeout when ``timeout_s`` passes and ProgrammingError on
        any other failure; in both cases the slot's content is unknown afterwards.
        """
        ...


@runtime_checkable
class FileProgrammer(Protocol):
    """A programmer that hands a tool the catalog's verified file (a path) rather than the image's bytes.

    Vendor tools read the file themselves, whole (an Intel GBS file with its header, an xclbin).
    """

    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float: ...

    def can_program(self, slot: Slot) -> bool:
        """Whether this programmer is configured for ``slot`` (a request for another is refused up front)."""
        ...

    async def program_file(self, slot: Slot, image_file: Path, accelerator_id: str, timeout_s: float) -> float:
        """Load the file ``image_file`` into ``slot``; as :meth:`Programmer.program` otherwise."""
        ...


@runtime_checkable
class CardProgrammer(Protocol):
    """A programmer that can also load one image into a whole card (all of its slots as one region)."""

    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float: ...

    def can_program_card(self, slots: Sequence[Slot]) -> bool:
        """Whether ``slots``, every slot of one card, can be programmed as the whole card."""
        ...

    async def program_card(self, slots: Sequence[Slot], image: bytes, accelerator_id: str, timeout_s: float) -> float:
        """Load ``image`` into the card of ``slots``; as :meth:`Programmer.program` otherwise (every slot's
        content is unknown after a failure)."""
        ...
