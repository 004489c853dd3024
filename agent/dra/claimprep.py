"""Preparing a DRA claim on this node: its slots programmed with the bitstream it asks for, its CDI spec, and
the claim recorded in ``state_file`` (what holds slots in DRA mode); release undoes it. See docs/dra.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from agent.dra.cards import OfferedCard, card_key, offered
from agent.dra.cdi import CdiSpecs
from agent.dra.service import ClaimRef, PreparedDevice
from agent.errors import CatalogError, PodLookupError, ProgrammingError, UnknownBitstream, shown, shown_claim
from agent.files.atomic import read_no_follow, write_atomically
from agent.kube.claims import AllocatedDevice, ClaimInfo
from agent.node.pods import PodDirectory, PodView
from agent.node.reconfigure import Reconfigurer, wanted_bitstream
from agent.slots.bitstreamrequest import BITSTREAM_PARAMETER, claim_bitstream, pod_bitstream
from agent.slots.model import Slot, SlotId
from agent.slots.registry import SlotRegistry, SlotState

logger = logging.getLogger(__name__)

STATE_VERSION = 1
T = TypeVar("T")


class ClaimLookup(Protocol):
    def read(self, namespace: str, name: str, uid: str) -> ClaimInfo: ...


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    namespace: str
    name: str
    uid: str
    slots: tuple[str, ...]
    devices: tuple[tuple[str, str, str], ...]  # (request, device, CDI ID)
    #: the pod the slots went to (the one reserved for the claim); "" when none was known
    pod: str = ""
    #: (slot, bitstream, accelerator ID) of each slot that held a known bitstream once prepared
    contents: tuple[tuple[str, str, str], ...] = ()

    @property
    def holder(self) -> tuple[str, str, str]:
        """(namespace, pod, container) of its slots' holder in the slot registry."""
        return self.namespace, self.pod, f"claim/{self.name}"


@dataclass(frozen=True, slots=True)
class OfferedDevice:
    """The slots of a device offered now: one, or every slot of a card offered whole (``card``)."""

    slots: list[Slot]
    card: bool


class ClaimPreparation:
    """``agent.dra.service.ClaimPreparer`` on the agent's slots."""

    def __init__(
        self,
        *,
        claims: ClaimLookup,
        registry: SlotRegistry,
        reconfigurer: Reconfigurer,
        pods: PodDirectory | None,
        cdi: CdiSpecs,
        node: str,
        state_file: Path,
        timeout_s: float,
        offered_cards: Callable[[Sequence[SlotState]], Sequence[OfferedCard]] = lambda _states: (),
    ) -> None:
        """``offered_cards``: the cards offered whole among the slots (``--whole-cards``), none by default."""
        self._claims = claims
        self._registry = registry
        self._reconfigurer = reconfigurer
        self._pods = pods
        self._cdi = cdi
        self._node = node
        self._state_file = state_file
        self._timeout_s = timeout_s
        self._prepared: dict[str, PreparedClaim] = self._load_state()
        self._offered_cards = offered_cards
        #: The record file as last read or written here; another identity: another agent instance wrote it.
        self._seen = _file_identity(state_file)

    def prepared(self, uid: str) -> PreparedClaim | None:
        """The record of a prepared claim."""
        return self._prepared.get(uid)

    def held_slots(self) -> set[str]:
        """The slots of every prepared claim."""
        return {slot for claim in list(self._prepared.values()) for slot in claim.slots}

    def restore_holders(self) -> None:
        """On the loop, before the first call: the registry's holders become the recorded claims' (only those that
        differ: setting one counts as a use of the slot)."""
        holders = self._registry.holders()
        stale = sorted(set(holders) - self.held_slots())
        if stale:
            logger.info("released slots %s: no prepared claim holds them", ",".join(stale))
            self._registry.release([SlotId(s) for s in stale])
        for claim in self._prepared.values():
            namespace, pod, container = claim.holder
            missing = [
                SlotId(s)
                for s in claim.slots
                if (h := holders.get(SlotId(s))) is None or (h.namespace, h.pod, h.container) != claim.holder
            ]
            if missing:
                logger.info(
                    "slots %s: held for %s again (its record)", ",".join(missing), shown_claim(namespace, claim.name)
                )
                self._registry.set_holder(missing, namespace, pod, container)

    # ------------------------------------------------------------------------- prepare
    async def prepare(self, claim: ClaimRef) -> list[PreparedDevice]:
        """The claim is read in a thread, the rest runs on the agent's loop."""
        deadline = time.monotonic() + self._timeout_s
        who = shown_claim(claim.namespace, claim.name)
        await self._run(self.refresh(), deadline, who)
        info = await asyncio.to_thread(self._claims.read, claim.namespace, claim.name, claim.uid)
        return await self._run(self._prepare(claim, info, who, deadline), deadline, who)

    async def _prepare(self, claim: ClaimRef, info: ClaimInfo, who: str, deadline: float) -> list[PreparedDevice]:
        pod = self._pod(info)
        mine, targets = await self.program(claim.uid, info, pod, who, deadline)
        slots = [slot for group in targets for slot in group]
        cdi_ids = iter(await asyncio.to_thread(self._cdi.write, claim.uid, slots))
        states = [s for s in map(self._registry.get, (slot.id for slot in slots)) if s is not None]
        record = PreparedClaim(
            claim.namespace,
            claim.name,
            claim.uid,
            tuple(s.id for s in slots),
            tuple((d.parent, d.device, next(cdi_ids)) for d, group in zip(mine, targets, strict=True) for _ in group),
            pod.name if pod is not None else info.reserved_for[0][0] if info.reserved_for else "",
            tuple((str(s.slot.id), s.bitstream, s.accelerator_id) for s in states if s.bitstream and s.accelerator_id),
        )
        await self._record(claim.uid, record)
        self._registry.set_holder([s.id for s in slots], *record.holder)
        cdi_of: dict[tuple[str, str], list[str]] = {}
        for request, device, cdi in record.devices:  # a whole card: one CDI device per slot
            cdi_of.setdefault((request, device), []).append(cdi)
        return [PreparedDevice(self._node, device, tuple(ids), (request,)) for (request, device), ids in cdi_of.items()]

    def devices(self) -> dict[str, OfferedDevice]:
        """Device name -> its slots (one; all of a card offered whole), of the devices offered now."""
        states = self._registry.snapshot()
        cards = self._offered_cards(states)
        by_key = {card_key(c.card): OfferedDevice(c.slots, True) for c in cards}
        by_key.update((str(state.slot.id), OfferedDevice([state.slot], False)) for state in states)
        return {name: by_key[key] for key, name in offered(states, cards)[0].items()}

    async def program(
        self, uid: str, info: ClaimInfo, pod: PodView | None, who: str, deadline: float
    ) -> tuple[list[AllocatedDevice], list[list[Slot]]]:
        """On the loop: the claim's devices in this node's pool and the slots of each (a card's: all), checked and
        programmed. Also run at allocation by ``agent.dra.binding``."""
        mine = [d for d in info.devices if d.pool == self._node]
        if not mine:
            raise PodLookupError(f"{who}: none of its devices is in this node's pool {shown(self._node)}")
        by_device = self.devices()
        offered = []
        for device in mine:
            if device.device not in by_device:
                raise PodLookupError(f"{who}: device {shown(device.device)} is not a slot or card of this node")
            offered.append(by_device[device.device])
        targets = [o.slots for o in offered]
        for slot in (slot for group in targets for slot in group):
            other = next((c for c in self._prepared.values() if c.uid != uid and slot.id in c.slots), None)
            if other is not None:
                raise ProgrammingError(
                    f"{who}: slot {slot.id} is already prepared for {shown_claim(other.namespace, other.name)}"
                )
        wanted: dict[str, list[SlotId]] = {}
        for device, o in zip(mine, offered, strict=True):
            if not o.card and (name := self._wanted(info, device, pod, who)) is not None:
                wanted.setdefault(name, []).append(o.slots[0].id)
        cards = [(d, o.slots) for d, o in zip(mine, offered, strict=True) if o.card]
        try:
            if wanted:
                await self._reconfigurer.load_many(pod, wanted, who, deadline)
            for device, group in cards:
                name = self._wanted(info, device, pod, who)
                if name is not None:
                    await self._reconfigurer.load_card(pod, name, [s.id for s in group], who, deadline)
        except UnknownBitstream as exc:
            raise UnknownBitstream(f"{exc}; {self._unknown_hint()}") from exc
        return mine, targets

    def _unknown_hint(self) -> str:
        """Why a bitstream the catalog lacks is final (the kubelet retries a failed prepare for ever)."""
        declared = (
            "no FpgaBitstream declares it either"
            if self._reconfigurer.fetch_bitstream is not None
            else "this node does not pull declared bitstreams"
        )
        return (
            f"{declared}, so no retry can prepare the claim until the bitstream is added to the node's catalog "
            "or declared; delete the pod to give back its allocated slot"
        )

    def _pod(self, info: ClaimInfo) -> PodView | None:
        if self._pods is None:
            return None
        for name, _uid in info.reserved_for:
            pod = self._pods.get(info.namespace, name)
            if pod is not None:
                return pod
        return None

    def _wanted(self, info: ClaimInfo, device: AllocatedDevice, pod: PodView | None, who: str) -> str | None:
        """The bitstream a device asks for: the driver's parameters, else the pod's annotation."""
        name = _bitstream(info.parameters_for(device), who)
        if name is None and pod is not None:
            # the container a request serves, in a claim the scheduler made for the extended resource
            container = (getattr(pod, "request_containers", None) or {}).get(device.parent)
            name = wanted_bitstream(pod, container) if container else _pod_bitstream(pod)
        return name

    async def _run(self, work: Coroutine[Any, Any, T], deadline: float, who: str) -> T:
        """Await ``work`` by ``deadline`` (and a second more, so that its own deadline error comes first)."""
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic()) + 1.0):
                return await work
        except TimeoutError:
            raise ProgrammingError(f"{who}: not done within {self._timeout_s:.0f} s") from None

    # ------------------------------------------------------------------------- release
    async def unprepare(self, claim: ClaimRef) -> None:
        """On the agent's loop: the spec and the record go, the slots are freed."""
        who = shown_claim(claim.namespace, claim.name)
        deadline = time.monotonic() + self._timeout_s
        await self._run(self.refresh(), deadline, who)
        await self._run(self._unprepare(claim), deadline, who)

    async def _unprepare(self, claim: ClaimRef) -> None:
        await asyncio.to_thread(self._cdi.remove, claim.uid)
        record = self._prepared.get(claim.uid)
        if record is None:
            return
        await self._record(claim.uid, None)
        self._registry.release([SlotId(s) for s in record.slots])

    # ---------------------------------------------------------------------- the record
    async def refresh(self) -> None:
        """On the loop, under the node's DRA lock: read the record again when another agent instance wrote it,
        and hold, free and record the content of the slots it changed."""
        seen = await asyncio.to_thread(_file_identity, self._state_file)
        if seen == self._seen:
            return
        before = self._prepared
        self._prepared = await asyncio.to_thread(self._load_state)
        self._seen = seen
        for uid, claim in self._prepared.items():
            if before.get(uid) == claim:
                continue
            for slot_id, bitstream, accelerator in claim.contents:
                if self._registry.get(SlotId(slot_id)) is not None:
                    self._registry.record_content(SlotId(slot_id), bitstream, accelerator)
        logger.info(
            "prepared claims read again from %s (written by another instance of the driver): %d claim(s)",
            self._state_file,
            len(self._prepared),
        )
        self.restore_holders()

    async def _record(self, uid: str, record: PreparedClaim | None) -> None:
        """On the loop: the new set is kept only once written (in a thread), so a cancelled call loses no record."""
        claims = dict(self._prepared)
        if record is None:
            claims.pop(uid, None)
        else:
            claims[uid] = record
        data = {"version": STATE_VERSION, "claims": [asdict(c) for c in claims.values()]}
        try:
            await asyncio.to_thread(write_atomically, self._state_file, json.dumps(data, indent=1).encode(), 0o600)
            self._seen = await asyncio.to_thread(_file_identity, self._state_file)
        except OSError as exc:
            raise ProgrammingError(f"cannot record prepared claims in {self._state_file}: {exc}") from exc
        self._prepared = claims

    def _load_state(self) -> dict[str, PreparedClaim]:
        try:
            data = json.loads(read_no_follow(self._state_file))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            logger.error("prepared claims in %s unreadable (%s): starting without them", self._state_file, exc)
            return {}
        claims = {}
        for raw in data.get("claims", []) if isinstance(data, dict) else []:
            try:
                record = PreparedClaim(
                    str(raw["namespace"]),
                    str(raw["name"]),
                    str(raw["uid"]),
                    tuple(str(s) for s in raw["slots"]),
                    tuple((str(r), str(d), str(c)) for r, d, c in raw["devices"]),
                    str(raw.get("pod") or ""),  # not in records of earlier versions
                    tuple((str(s), str(b), str(a)) for s, b, a in raw.get("contents") or ()),
                )
            except (KeyError, TypeError, ValueError) as exc:
                logger.error("a prepared claim in %s is malformed (%s): skipped", self._state_file, exc)
                continue
            claims[record.uid] = record
        return claims


def _file_identity(path: Path) -> tuple[int, int, int] | None:
    """(inode, mtime ns, size) of the record, None when there is none: a rename into place changes it."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _pod_bitstream(pod: PodView) -> str | None:
    asked = pod_bitstream(pod.annotations)
    return None if asked is None else str(asked[1])


def _bitstream(parameters: Mapping[str, Any], who: str) -> str | None:
    value = claim_bitstream(parameters)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise CatalogError(f"{who}: parameter {BITSTREAM_PARAMETER} must be a bitstream name, got {shown(value)}")
    return value
