"""What a claim's slots hold, written to its ``status.devices[]`` entries (``data``) after NodePrepareResources
(best effort) and, with binding conditions, once programmed at allocation (:mod:`agent.dra.binding`)."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent.dra.claimprep import ClaimPreparation
from agent.dra.service import ClaimRef, PreparedDevice
from agent.errors import FpgaSlotError, shown_claim
from agent.kube.claims import DeviceStatus
from agent.slots.model import SlotId
from agent.slots.registry import SlotRegistry

logger = logging.getLogger(__name__)

#: Claims whose slot contents found at allocation are kept for their prepare (oldest dropped first).
MAX_REMEMBERED_CLAIMS = 256


@dataclass(frozen=True, slots=True)
class SlotContent:
    """What one allocated slot holds, as its device entry's ``data`` says."""

    slot: str
    bitstream: str
    sha256: str
    accelerator_id: str
    #: RFC 3339 time this agent programmed it; "" when it found it loaded and does not know since when
    programmed_at: str
    cache_hit: bool

    @property
    def loaded(self) -> tuple[str, str]:
        return self.bitstream, self.accelerator_id

    def data(self) -> dict[str, Any]:
        optional = {"sha256": self.sha256, "acceleratorId": self.accelerator_id, "programmedAt": self.programmed_at}
        return {"slot": self.slot, "bitstream": self.bitstream, "cacheHit": self.cache_hit} | {
            key: value for key, value in optional.items() if value
        }


class StatusWriter(Protocol):
    """``agent.kube.claims.ClaimStatusWriter`` (blocking)."""

    def apply(self, namespace: str, name: str, uid: str, entries: Sequence[DeviceStatus]) -> None: ...


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ContentTracker:
    """Reads what slots hold before and after a claim's programming (on the agent's loop); ``sha256_of``: the
    catalog entry's digest ("" when unknown; called in a thread)."""

    def __init__(self, registry: SlotRegistry, sha256_of: Callable[[str], str]) -> None:
        self._registry = registry
        self._sha256_of = sha256_of
        #: slot -> when this agent last programmed it (one entry per slot at most)
        self._programmed: dict[str, str] = {}
        self._claims: OrderedDict[str, tuple[SlotContent, ...]] = OrderedDict()

    def loaded(self) -> dict[str, str | None]:
        """Slot -> accelerator ID, to compare with after a programming."""
        return {str(s.slot.id): s.accelerator_id for s in self._registry.snapshot()}

    async def contents(self, slot_ids: Iterable[str], before: Mapping[str, str | None]) -> list[SlotContent]:
        """Each slot's content now; a slot whose accelerator changed since ``before`` was programmed now."""
        found = []
        for slot_id in slot_ids:
            state = self._registry.get(SlotId(slot_id))
            if state is None or not state.bitstream:
                continue
            accelerator = state.accelerator_id or ""
            hit = slot_id in before and before[slot_id] == accelerator
            if not hit:
                self._programmed[slot_id] = _now()
            sha = await asyncio.to_thread(self._sha256_of, state.bitstream)
            programmed_at = self._programmed.get(slot_id, "")
            found.append(SlotContent(slot_id, state.bitstream, sha, accelerator, programmed_at, hit))
        return found

    def remember(self, uid: str, contents: Sequence[SlotContent]) -> None:
        """What the claim's slots held once programmed at allocation, for the data its prepare writes."""
        self._claims[uid] = tuple(contents)
        self._claims.move_to_end(uid)
        while len(self._claims) > MAX_REMEMBERED_CLAIMS:
            self._claims.popitem(last=False)

    def remembered(self, uid: str) -> tuple[SlotContent, ...]:
        return self._claims.get(uid, ())


class ReportingPreparer:
    """``ClaimPreparation`` that also writes each prepared device's content to the claim's status."""

    def __init__(self, inner: ClaimPreparation, tracker: ContentTracker, writer: StatusWriter, node: str) -> None:
        self._inner = inner
        self._tracker = tracker
        self._writer = writer
        self._node = node

    async def prepare(self, claim: ClaimRef) -> list[PreparedDevice]:
        before = self._tracker.loaded()
        devices = await self._inner.prepare(claim)
        await self._report(claim, before)
        return devices

    async def unprepare(self, claim: ClaimRef) -> None:
        await self._inner.unprepare(claim)

    async def _report(self, claim: ClaimRef, before: Mapping[str, str | None]) -> None:
        record = self._inner.prepared(claim.uid)
        if record is None:
            return
        earlier = {c.slot: c for c in self._tracker.remembered(claim.uid)}
        now = {c.slot: c for c in await self._tracker.contents(record.slots, before)}
        entries = []
        seen = set()
        for slot_id, (_request, device, _cdi) in zip(record.slots, record.devices, strict=True):
            if device in seen:  # a whole card: one entry, what its first slot says of it
                continue
            seen.add(device)
            content, then = now.get(slot_id), earlier.get(slot_id)
            if then is not None and (content is None or then.loaded == content.loaded):
                content = then  # as programmed at allocation: its hit and time, not prepare's "found it loaded"
            if content is not None:
                entries.append(DeviceStatus(self._node, device, (), content.data()))
        if not entries:
            return
        try:
            await asyncio.to_thread(self._writer.apply, claim.namespace, claim.name, claim.uid, entries)
        except FpgaSlotError as exc:
            logger.warning(
                "%s: what its slots hold not written to its status: %s", shown_claim(claim.namespace, claim.name), exc
            )
