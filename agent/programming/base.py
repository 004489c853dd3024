"""The interface every programmer implements."""

from __future__ import annotations

from typing import Protocol

from agent.slots import Slot


class Programmer(Protocol):
    """Reconfigures slots of one backend."""

    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        """Load ``image`` into ``slot``; return the seconds the hardware took.

        Raises ProgrammingTimeout when ``timeout_s`` passes and ProgrammingError on
        any other failure; in both cases the slot's content is unknown afterwards.
        """
        ...
