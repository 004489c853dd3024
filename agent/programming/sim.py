"""Programmer for simulated cards (timed, can be made to fail or hang): slots, and whole cards."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Sequence
from typing import Any

from agent.errors import ProgrammingError, ProgrammingTimeout
from agent.simfpga import SimFabric
from agent.slots.model import Slot

logger = logging.getLogger(__name__)


class SimProgrammer:
    """Programs a :class:`SimFabric`; one slot per card at a time, cards in parallel."""

    def __init__(self, fabric: SimFabric) -> None:
        self._fabric = fabric

    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        work = self._fabric.program(slot.card, slot.region, accelerator_id)
        return await _timed(f"slot {slot.id}", work, image, accelerator_id, timeout_s)

    def can_program_card(self, slots: Sequence[Slot]) -> bool:
        return bool(slots) and len({slot.card for slot in slots}) == 1

    async def program_card(self, slots: Sequence[Slot], image: bytes, accelerator_id: str, timeout_s: float) -> float:
        work = self._fabric.program_card(slots[0].card, accelerator_id)
        return await _timed(f"card {slots[0].card}", work, image, accelerator_id, timeout_s)


async def _timed(
    what: str, work: Coroutine[Any, Any, None], image: bytes, accelerator_id: str, timeout_s: float
) -> float:
    """Run the fabric's ``work`` by ``timeout_s``, its errors as the programming errors; the seconds it took."""
    if not image:
        work.close()
        raise ProgrammingError(f"{what}: bitstream image is empty")
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            await work
    except TimeoutError as exc:
        raise ProgrammingTimeout(
            f"{what}: programming {accelerator_id} did not finish within {timeout_s:.1f} s"
        ) from exc
    except OSError as exc:
        raise ProgrammingError(f"{what}: programming {accelerator_id} failed: {exc}") from exc
    took = time.monotonic() - started
    logger.info("%s programmed with %s in %.0f ms", what, accelerator_id, took * 1000)
    return took
