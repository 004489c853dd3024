"""DRA mode: the node's slots as devices of the DRA driver ``fpga.example.com`` (docs/dra.md).

Wires the slot registry to claim preparation, the plugin server, the ResourceSlice and the health stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from agent.dra.binding import (
    BOUND_CONDITION,
    FAILED_CONDITION,
    FAILED_TAINT,
    AllocationProgrammer,
    ClaimStatusAccess,
    FailedSlots,
)
from agent.dra.cards import CARD_CAPACITY, CARD_TAINT, OfferedCard, card_key, counter_sets, offered, offered_cards
from agent.dra.cdi import CdiSpecs
from agent.dra.claimprep import ClaimLookup, ClaimPreparation
from agent.dra.constants import DRIVER_NAME
from agent.dra.devicestatus import ContentTracker, ReportingPreparer
from agent.dra.health import DeviceHealth, HealthBoard
from agent.dra.naming import NameClash
from agent.dra.server import DraPluginServer, PluginSockets
from agent.errors import KubeError
from agent.kube.resourceslices import CounterSet, DeviceTaint, SliceDevice
from agent.node.pods import PodDirectory
from agent.node.reconfigure import Reconfigurer
from agent.slots.model import Health, Slot, eviction_key
from agent.slots.registry import SlotRegistry, SlotState

logger = logging.getLogger(__name__)

#: The taint key of a slot that is not healthy (effect NoSchedule).
UNHEALTHY_TAINT = f"{DRIVER_NAME}/unhealthy"
#: The capacity every slot's device has, so that a claim can ask for a slot (or for a bitstream) without CEL
#: (docs/dra.md, "What a slot publishes").
SLOT_CAPACITY = f"{DRIVER_NAME}/slot"
#: The longest capacity name (the part after the domain): a C identifier of at most 32 characters.
MAX_IDENTIFIER = 32
#: How often the record of prepared claims is checked for another instance's changes.
RECORD_POLL_S = 2.0
#: The file (in the state directory) that records the prepared claims.
CLAIMS_FILE = "dra-claims.json"


class SlicePublisher(Protocol):
    """What keeps the node's ResourceSlice (``agent.kube.resourceslices.ResourceSlicePublisher``)."""

    def set_devices(self, devices: Sequence[SliceDevice], counters: Sequence[CounterSet] = ()) -> None: ...

    def refresh(self) -> None: ...

    async def run(self, stop: asyncio.Event) -> None: ...


def slice_devices(
    states: Sequence[SlotState],
    names: Mapping[str, str] | None = None,
    *,
    failed: frozenset[str] = frozenset(),
    binding: bool = False,
    cards: Sequence[OfferedCard] = (),
) -> list[SliceDevice]:
    """One device per slot, empty (or unknown) first, then the least recently used, then by ID
    (:func:`agent.slots.eviction_key`: the allocator takes the first free match), then the cards.

    ``bitstream`` is "" when empty, unknown or being programmed; an unhealthy slot has ``UNHEALTHY_TAINT``, one in
    ``failed`` ``FAILED_TAINT``. ``names``: from :func:`offered`; ``binding``: add the binding conditions.
    """
    names = offered(states, cards)[0] if names is None else names
    conditions: dict[str, tuple[str, ...]] = (
        {"binding_conditions": (BOUND_CONDITION,), "binding_failure_conditions": (FAILED_CONDITION,)} if binding else {}
    )
    counters = {s.slot.id: names[card_key(c.card)] for c in cards if card_key(c.card) in names for s in c.states}
    devices = []
    for state in sorted(states, key=lambda s: eviction_key(s.bitstream, s.last_used, s.slot.id)):
        slot = state.slot
        if slot.id not in names:
            continue
        held = "" if state.programming is not None or slot.whole_card else state.bitstream or ""
        attributes = _attributes(slot, held, "slot" if cards else None)
        taints = _taints(state.health, slot.id in failed)
        capacity = {SLOT_CAPACITY: 1} | _held_capacity(held)
        consumes: tuple[tuple[str, tuple[str, ...]], ...] = (
            ((counters[slot.id], (names[slot.id],)),) if slot.id in counters else ()
        )
        devices.append(SliceDevice(names[slot.id], attributes, taints, capacity, consumes=consumes, **conditions))
    for card in cards:
        name = names.get(card_key(card.card))
        if name is None or any(s.slot.id not in names for s in card.states):
            continue
        first = card.states[0].slot
        attributes = _attributes(first, card.bitstream, "card") | {"slots": len(card.states)}
        taints = (DeviceTaint(CARD_TAINT), *_taints(card.health, any(s.slot.id in failed for s in card.states)))
        capacity = {CARD_CAPACITY: 1} | _held_capacity(card.bitstream)
        consumes = ((name, tuple(names[s.slot.id] for s in card.states)),)
        devices.append(SliceDevice(name, attributes, taints, capacity, consumes=consumes, **conditions))
    return devices


def _attributes(slot: Slot, held: str, kind: str | None) -> dict[str, str | int | bool]:
    attributes: dict[str, str | int | bool] = {"platform": slot.platform, "card": slot.card, "bitstream": held}
    if slot.numa is not None:
        attributes["numa"] = slot.numa
    if kind is not None:
        attributes["kind"] = kind
    return attributes


def _taints(health: Health, failed: bool) -> tuple[DeviceTaint, ...]:
    taints = () if health is Health.HEALTHY else (DeviceTaint(UNHEALTHY_TAINT),)
    return (*taints, DeviceTaint(FAILED_TAINT)) if failed else taints


def bitstream_capacity(bitstream: str) -> str | None:
    """``fpga.example.com/bs_<name as a C identifier>`` (escaped as the admission policy does); None: too long."""
    identifier = "bs_" + bitstream.replace("_", "__").replace("-", "_d").replace(".", "_p")
    if len(identifier) > MAX_IDENTIFIER:
        return None
    return f"{DRIVER_NAME}/{identifier}"


def _held_capacity(held: str) -> dict[str, int]:
    key = bitstream_capacity(held) if held else None
    return {key: 1} if key is not None else {}


def device_health(
    pool: str,
    states: Sequence[SlotState],
    names: Mapping[str, str] | None = None,
    cards: Sequence[OfferedCard] = (),
) -> list[DeviceHealth]:
    """Every device's health for the kubelet (a card is healthy while all its slots are)."""
    names = offered(states, cards)[0] if names is None else names
    healths = [(str(s.slot.id), s.health, s.reason) for s in states]
    healths += [(card_key(c.card), c.health, c.reason) for c in cards]
    return [
        DeviceHealth(pool, names[key], health is Health.HEALTHY, reason)
        for key, health, reason in healths
        if key in names
    ]


class DraMode:
    """The DRA plugin of one node: claim preparation, the plugin server, the slice and the health stream."""

    def __init__(
        self,
        *,
        node: str,
        registry: SlotRegistry,
        reconfigurer: Reconfigurer,
        pods: PodDirectory | None,
        claims: ClaimLookup,
        slices: SlicePublisher,
        sockets: PluginSockets,
        cdi_dir: Path,
        state_dir: Path,
        timeout_s: float,
        status: ClaimStatusAccess,
        whole_cards: bool = False,
    ) -> None:
        """On the agent's loop. ``status``: write what claims' slots hold (and maybe program at allocation)."""
        self.node = node
        self._whole_cards = whole_cards
        self._can_program_card = reconfigurer.loader.can_program_card
        self._registry = registry
        self._slices = slices
        self._status = status
        self.preparation = ClaimPreparation(
            claims=claims,
            registry=registry,
            reconfigurer=reconfigurer,
            pods=pods,
            cdi=CdiSpecs(cdi_dir, DRIVER_NAME),
            node=node,
            state_file=state_dir / CLAIMS_FILE,
            timeout_s=timeout_s,
            offered_cards=self.offered_cards,
        )
        self.health = HealthBoard()
        self._slice_error = ""
        self._clashes: set[NameClash] = set()
        self.tracker = ContentTracker(registry, status.sha256_of)
        preparer = ReportingPreparer(self.preparation, self.tracker, status.prepare_writer, node)
        self.server = DraPluginServer(preparer, sockets, self.health, on_registered=slices.refresh)
        self.failed = FailedSlots(lambda: self._publish(self._registry.snapshot()))
        self.programmer: AllocationProgrammer | None = None
        if status.binding_conditions:
            self.programmer = AllocationProgrammer(
                node=node,
                preparation=self.preparation,
                tracker=self.tracker,
                writer=status.binding_writer,
                exclusive=self.server.exclusive,
                failed=self.failed,
                events=status.events,
                timeout_s=timeout_s,
            )

    def offered_cards(self, states: Sequence[SlotState]) -> list[OfferedCard]:
        """The cards offered whole (none unless ``whole_cards``)."""
        return offered_cards(states, self._can_program_card) if self._whole_cards else []

    def registered(self) -> bool:
        """Whether the kubelet said it registered the driver."""
        return self.server.registration.status == (True, "")

    async def run(self, stop: asyncio.Event) -> None:
        """Hold the prepared claims' slots, then serve and keep the slice and health list until ``stop``."""
        self.preparation.restore_holders()
        self._publish(self._registry.snapshot())
        await self.server.start()
        try:
            async with asyncio.TaskGroup() as group:
                background = [
                    group.create_task(self._follow_slots(), name="dra-slots"),
                    group.create_task(self._follow_record(), name="dra-record"),
                    group.create_task(self.failed.run(), name="dra-failed-slots"),
                ]
                group.create_task(self._slices.run(stop), name="resource-slice")
                if self.programmer is not None:
                    programmer = self.programmer
                    watcher = self._status.watch(
                        parse=programmer.parse,
                        on_replace=programmer.replace,
                        on_event=programmer.event,
                        on_error=lambda text: logger.warning("ResourceClaims not listed: %s", text),
                    )
                    background.append(group.create_task(watcher.run(), name="dra-claims"))
                await stop.wait()
                for task in background:
                    task.cancel()
        finally:
            if self.programmer is not None:
                await self.programmer.close()
            await self.server.stop()
            logger.info("DRA driver %s stopped serving", DRIVER_NAME)

    async def _follow_record(self) -> None:
        """Read the claims record every ``RECORD_POLL_S``: during an update the other instance may change it."""
        while True:
            await asyncio.sleep(RECORD_POLL_S)
            await self.preparation.refresh()

    async def _follow_slots(self) -> None:
        version = self._registry.version
        while True:
            version = await self._registry.wait_for_change(version)
            self._publish(self._registry.snapshot())

    def _publish(self, states: Sequence[SlotState]) -> None:
        cards = self.offered_cards(states)
        names, clashes = offered(states, cards)
        self._report_clashes(clashes)
        self.health.set(device_health(self.node, states, names, cards))
        try:
            devices = slice_devices(
                states, names, failed=self.failed.tainted(), binding=self.programmer is not None, cards=cards
            )
            self._slices.set_devices(devices, counter_sets(cards, names))
        except KubeError as exc:
            if str(exc) != self._slice_error:  # once per distinct problem, not on every change
                logger.error("ResourceSlice not updated: %s (it keeps the last good devices)", exc)
            self._slice_error = str(exc)
        else:
            self._slice_error = ""

    def _report_clashes(self, found: Sequence[NameClash]) -> None:
        """A warning for each pair of slots with one plain device name, once while it lasts."""
        for c in sorted(set(found) - self._clashes, key=lambda c: c.name):
            same = f"slots {c.kept} and {c.renamed} have the same DRA device name {c.name}"
            if c.renamed_as:
                logger.warning("%s: slot %s is device %s", same, c.renamed, c.renamed_as)
            else:
                logger.error(
                    "%s, and the other name of %s is taken too: slot %s is left out of the ResourceSlice",
                    same,
                    c.renamed,
                    c.renamed,
                )
        self._clashes = set(found)
