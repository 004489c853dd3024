"""Programmer for simulated cards (timed, can be made to fail or hang): slots, and whole cards."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from agent.errors import ProgrammingError, ProgrammingTimeout
from agent.simfpga import SimFabric
from agent.slots import Slot

logger = logging.getLogger(__name__)


class SimProgrammer:
    """Programs a :class:`SimFabric`; one slot per card at a time, cards in parallel."""

    def __init__(self, fabric: SimFabric) -> None:
        self._fabric = fabric

    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        if not image:
            raise ProgrammingError(f"slot {slot.id}: bitstream image is empty")
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout_s):
                await self._fabric.program(slot.card, slot.region, accelerator_id)
        except TimeoutError as exc:
            raise ProgrammingTimeout(
                f"slot {slot.id}: programming {accelerator_id} did not finish within {timeout_s:.1f} s"
            ) from exc
        except OSError as exc:
            raise ProgrammingError(f"slot {slot.id}: programming {accelerator_id} failed: {exc}") from exc
        took = time.monotonic() - started
        logger.info("slot %s programmed with %s in %.0f ms", slot.id, accelerator_id, took * 1000)
        return took

    def can_program_card(self, slots: Sequence[Slot]) -> bool:
        return bool(slots) and len({slot.card for slot in slots}) == 1

    async def program_card(self, slots: Sequence[Slot], image: bytes, accelerator_id: str, timeout_s: float) -> float:
        card = slots[0].card
        if not image:
            raise ProgrammingError(f"card {card}: bitstream image is empty")
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout_s):
                await self._fabric.program_card(card, accelerator_id)
        except TimeoutError as exc:
            raise ProgrammingTimeout(
                f"card {card}: programming {accelerator_id} did not finish within {timeout_s:.1f} s"
            ) from exc
        except OSError as exc:
            raise ProgrammingError(f"card {card}: programming {accelerator_id} failed: {exc}") from exc
        took = time.monotonic() - started
        logger.info("card %s programmed with %s in %.0f ms", card, accelerator_id, took * 1000)
        return took
