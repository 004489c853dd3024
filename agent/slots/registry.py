"""The node's slot table: what discovery reports, merged with who holds each slot.

Mutated only from the event loop's thread; every change wakes :meth:`SlotRegistry.wait_for_change`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent.errors import DuplicateSlotError, RequestError, UnhealthySlotError, UnknownSlotError, shown
from agent.slots.model import Health, Holder, Slot, SlotId

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Content:
    """A bitstream the agent loaded (or found loaded) into a slot."""

    bitstream: str
    accelerator_id: str


@dataclass(frozen=True, slots=True)
class SlotState:
    """A slot with its assignment, as the plugin and the CLI show it."""

    slot: Slot
    holder: Holder | None
    last_used: float | None
    present: bool
    content: Content | None = None
    taint: str | None = None
    #: What a programming under way will load: until it ends, the content is unknown.
    programming: Content | None = None

    @property
    def health(self) -> Health:
        """Unhealthy when the device vanished, its content is unknown, or it reports so."""
        if not self.present or self.taint is not None:
            return Health.UNHEALTHY
        return self.slot.health

    @property
    def reason(self) -> str:
        """Why the slot is unhealthy ('' when healthy)."""
        if not self.present:
            return "device is gone"
        if self.taint is not None:
            return self.taint
        return self.slot.reason if self.slot.health is Health.UNHEALTHY else ""

    @property
    def accelerator_id(self) -> str | None:
        """What the slot holds: as the hardware reports it, else as the agent recorded it."""
        if self.slot.loaded is not None:
            return self.slot.loaded
        return self.content.accelerator_id if self.content is not None else None

    @property
    def bitstream(self) -> str | None:
        """The catalog name of what the slot holds, when the agent knows it."""
        if self.content is None or self.accelerator_id != self.content.accelerator_id:
            return None
        return self.content.bitstream


class SlotRegistry:
    """Slots by ID, each with its holder and content (one record a slot); wakes waiters on every change."""

    def __init__(self, clock: Clock = time.time) -> None:
        self._clock = clock
        self._states: dict[SlotId, SlotState] = {}
        self._version = 0
        self._changed = asyncio.Event()
        self._device_version = 0
        self._devices_changed = asyncio.Event()

    # ----------------------------------------------------------------- reading
    @property
    def version(self) -> int:
        """Increases by one on every change."""
        return self._version

    def snapshot(self) -> list[SlotState]:
        """All listed slots, sorted by ID."""
        return [self._states[slot_id] for slot_id in sorted(self._states)]

    def get(self, slot_id: SlotId) -> SlotState | None:
        return self._states.get(slot_id)

    async def wait_for_change(self, seen_version: int) -> int:
        """Return the current version once it differs from ``seen_version``."""
        while self._version == seen_version:
            await self._changed.wait()
        return self._version

    @property
    def device_version(self) -> int:
        """Increases when the IDs listed or their health may change (not holders or last use)."""
        return self._device_version

    async def wait_for_device_change(self, seen_version: int) -> int:
        """Return the current device version once it differs from ``seen_version``."""
        while self._device_version == seen_version:
            await self._devices_changed.wait()
        return self._device_version

    # -------------------------------------------------------------- discovery
    def replace_all(self, slots: Iterable[Slot], backend: str | None = None) -> None:
        """Take a full enumeration (of ``backend`` only, if given): missing slots are removed, or kept if held."""
        fresh = {slot.id: slot for slot in slots}
        changed = False
        for slot_id, known in list(self._states.items()):
            if slot_id not in fresh and (backend is None or known.slot.backend == backend):
                changed = changed or known.present
                self._drop(known)
        for slot in fresh.values():
            changed = self._put(slot) or changed
        if changed:
            self._bump()

    def upsert(self, slot: Slot) -> None:
        if self._put(slot):
            self._bump()

    def _put(self, slot: Slot) -> bool:
        known = self._states.get(slot.id)
        if known is not None and known.slot == slot and known.present:
            return False
        self._states[slot.id] = (
            SlotState(slot, None, None, True) if known is None else replace(known, slot=slot, present=True)
        )
        return True

    def remove(self, slot_id: SlotId) -> None:
        """A slot's device disappeared: a held slot stays listed (Unhealthy) until released, a free one goes."""
        if slot_id in self._states:
            self._drop(self._states[slot_id])
            self._bump()

    # ------------------------------------------------------------- assignment
    def validate(self, slot_ids: Sequence[str]) -> list[Slot]:
        """Check a request's IDs without changing anything: RequestError when it names no slot, else
        UnknownSlotError, DuplicateSlotError or UnhealthySlotError naming the first offending ID."""
        if not slot_ids:
            raise RequestError("the request names no slot")
        seen: set[str] = set()
        chosen: list[Slot] = []
        for raw in slot_ids:
            if raw in seen:
                raise DuplicateSlotError(f"slot {shown(raw)} is requested more than once")
            seen.add(raw)
            state = self.get(SlotId(raw))
            if state is None:
                raise UnknownSlotError(f"slot {shown(raw)} is not advertised by this node")
            if state.health is not Health.HEALTHY:
                raise UnhealthySlotError(f"slot {shown(raw)} is unhealthy: {state.reason or 'unhealthy'}")
            chosen.append(state.slot)
        return chosen

    def assign(self, groups: Sequence[Sequence[str]]) -> list[list[Slot]]:
        """Assign each container's slots, all validated first; a slot still believed held is re-assigned."""
        for index, group in enumerate(groups):
            if not group:
                raise RequestError(f"container request {index} names no slot")
        self.validate([slot_id for group in groups for slot_id in group])
        now = self._clock()
        result: list[list[Slot]] = []
        for group in groups:
            for raw in group:
                self._update(SlotId(raw), holder=Holder(allocated_at=now), last_used=now)
            result.append([self._states[SlotId(raw)].slot for raw in group])
        self._bump(devices=False)
        return result

    def set_holder(self, slot_ids: Iterable[SlotId], namespace: str, pod: str, container: str) -> None:
        """Record which pod/container the slots went to (learned at PreStartContainer)."""
        now = self._clock()
        for slot_id in slot_ids:
            if (state := self._states.get(slot_id)) is not None:
                allocated_at = state.holder.allocated_at if state.holder else now
                self._update(slot_id, holder=Holder(allocated_at, namespace, pod, container), last_used=now)
        self._bump(devices=False)

    def holders(self) -> dict[SlotId, Holder]:
        return {slot_id: state.holder for slot_id, state in self._states.items() if state.holder is not None}

    # --------------------------------------------------------------- contents
    def begin_programming(self, slot_id: SlotId, bitstream: str, accelerator_id: str) -> None:
        """A programming starts: the content is unknown until it ends (and after a restart unless reported)."""
        self._update(slot_id, content=None, programming=Content(bitstream, accelerator_id))
        self._bump(devices=False)

    def record_content(self, slot_id: SlotId, bitstream: str, accelerator_id: str) -> None:
        """A programming succeeded (or a hit was confirmed): the slot holds ``bitstream``."""
        content = Content(bitstream, accelerator_id)
        before = self._update(slot_id, programming=None, content=content, taint=None, last_used=self._clock())
        self._bump(devices=before is not None and before.taint is not None)

    def forget_contents(self, slot_ids: Iterable[SlotId]) -> None:
        """What the slots held is gone (their card's base layout was restored): nothing known until reported."""
        before = [self._update(slot_id, content=None) for slot_id in slot_ids]
        if any(state is not None and state.content is not None for state in before):
            self._bump(devices=False)

    def taint(self, slot_id: SlotId, reason: str) -> None:
        """A programming failed or timed out: the content is unknown, the slot Unhealthy."""
        self._update(slot_id, programming=None, content=None, taint=reason)
        self._bump()

    def restore(
        self,
        slot_id: SlotId,
        content: Content | None,
        holder: Holder | None,
        last_used: float | None,
        programming: Content | None = None,
        *,
        confirmed_only: bool = False,
    ) -> bool:
        """Take a slot's state from the checkpoint; what the hardware reports wins.

        A recorded content is dropped when the slot reports another accelerator (with ``confirmed_only``: also
        none); an interrupted ``programming`` counts only if reported. False when that left it unknown.
        """
        state = self._states.get(slot_id)
        if state is None:
            return True
        loaded = state.slot.loaded
        if programming is not None:
            content = programming if loaded is not None and loaded == programming.accelerator_id else None
        restored: dict[str, Any] = {}
        if content is not None and (loaded == content.accelerator_id or (loaded is None and not confirmed_only)):
            restored["content"] = content
        if holder is not None:
            restored["holder"] = holder
        if last_used is not None:
            restored["last_used"] = last_used
        self._update(slot_id, **restored)
        self._bump(devices=False)
        return programming is None or content is not None

    def release(self, slot_ids: Iterable[SlotId]) -> None:
        """Slots whose holder is gone become free; a vanished one leaves the list."""
        changed = forgotten = False
        for slot_id in slot_ids:
            state = self._states.get(slot_id)
            if state is not None and state.holder is not None:
                changed = True
                if state.present:
                    self._update(slot_id, holder=None)
                else:
                    del self._states[slot_id]
                    forgotten = True
        if changed:
            self._bump(devices=forgotten)

    # ---------------------------------------------------------------- helpers
    def _update(self, slot_id: SlotId, **changes: Any) -> SlotState | None:
        """Change a listed slot's record (an unlisted ID is ignored); the record as it was."""
        state = self._states.get(slot_id)
        if state is not None:
            self._states[slot_id] = replace(state, **changes)
        return state

    def _drop(self, state: SlotState) -> None:
        """The slot's device is gone: a held slot stays listed (not present), a free one is forgotten."""
        if state.holder is not None:
            self._states[state.slot.id] = replace(state, present=False)
        else:
            del self._states[state.slot.id]

    def _bump(self, devices: bool = True) -> None:
        """Wake the waiters of every change and, with ``devices``, those of device-list changes."""
        self._version += 1
        self._changed.set()
        self._changed = asyncio.Event()
        if devices:
            self._device_version += 1
            self._devices_changed.set()
            self._devices_changed = asyncio.Event()
