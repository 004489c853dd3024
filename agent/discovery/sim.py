"""Discovery over simulated cards: the fabric's add/change/remove events applied to the sink in the loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from agent.discovery.base import Enumeration
from agent.simfpga import SimEvent, SimFabric, SimSlotInfo
from agent.simfpga.faultfiles import follow_fault_files
from agent.slots.model import DeviceNode, Health, Slot, make_slot_id
from agent.slots.registry import SlotRegistry

logger = logging.getLogger(__name__)

#: Where a container sees a simulated slot's device file.
CONTAINER_DEV_DIR = "/dev/fpga-sim"


def slot_from_sim(info: SimSlotInfo) -> Slot:
    slot_id = make_slot_id(info.card, info.region)
    return Slot(
        id=slot_id,
        card=info.card,
        region=info.region,
        numa=info.numa,
        device_nodes=(DeviceNode(info.device_path, f"{CONTAINER_DEV_DIR}/{slot_id}"),),
        platform=info.platform,
        loaded=info.loaded,
        health=Health.HEALTHY if info.healthy else Health.UNHEALTHY,
        backend="sim",
        reason=info.reason,
        whole_card=info.whole_card,
    )


class SimSource:
    name = "sim"

    def __init__(self, fabric: SimFabric) -> None:
        self._fabric = fabric

    async def enumerate(self) -> Enumeration:
        return Enumeration(slots=[slot_from_sim(info) for info in self._fabric.slots()])

    async def watch(self, sink: SlotRegistry) -> None:
        events: asyncio.Queue[tuple[SimEvent, SimSlotInfo]] = asyncio.Queue()
        unsubscribe = self._fabric.subscribe(lambda event, info: events.put_nowait((event, info)))
        faults = asyncio.create_task(follow_fault_files(self._fabric), name="sim-fault-files")
        try:
            sink.replace_all((await self.enumerate()).slots, backend=self.name)
            while True:
                event, info = await events.get()
                slot = slot_from_sim(info)
                if event is SimEvent.REMOVE:
                    logger.info("slot %s removed (card %s unplugged)", slot.id, info.card)
                    sink.remove(slot.id)
                else:
                    sink.upsert(slot)
        finally:
            unsubscribe()
            faults.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await faults
