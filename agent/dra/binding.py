"""Program before bind: slots are programmed when the scheduler allocates them, the verdict is written as a
binding condition; a failure also taints the slots for a while. See docs/dra.md, "Program before bind".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from agent.dra.claimprep import ClaimPreparation
from agent.dra.constants import DRIVER_NAME
from agent.dra.devicestatus import ContentTracker, SlotContent, StatusWriter
from agent.errors import FpgaSlotError, KubeError, shown_claim
from agent.kube.claims import ClaimInfo, Condition, DeviceStatus, parse_claim
from agent.node.pods import EventSink

logger = logging.getLogger(__name__)

BOUND_CONDITION = f"{DRIVER_NAME}/Programmed"
FAILED_CONDITION = f"{DRIVER_NAME}/ProgrammingFailed"
#: The device taint (NoSchedule) of a slot whose programming at allocation failed, for FAILED_TAINT_S.
FAILED_TAINT = f"{DRIVER_NAME}/programming-failed"
FAILED_TAINT_S = 120.0
#: Claims handled here, remembered so that a watch event repeating one is not programmed twice.
MAX_HANDLED = 1024


@dataclass(frozen=True, slots=True)
class ClaimStatusAccess:
    """What DRA mode needs to write claims' device status and, with ``binding_conditions``, program at allocation."""

    prepare_writer: StatusWriter
    binding_writer: StatusWriter
    #: (parse, on_replace, on_event, on_error) -> something to ``await .run()`` (``agent.kube.reflector.Watcher``)
    watch: Callable[..., Any]
    sha256_of: Callable[[str], str]
    events: EventSink | None
    binding_conditions: bool


@dataclass(frozen=True, slots=True)
class Allocation:
    """A claim with devices of this node's pool, and whether the scheduler waits for our verdict on it."""

    info: ClaimInfo
    waiting: bool
    #: This allocation of the claim: after a failure the scheduler allocates the same claim again.
    key: tuple[str, ...] = ()


def parse_allocation(raw: Mapping[str, Any], node: str) -> Allocation | None:
    """None for a claim without devices of ``node``'s pool (or not allocated)."""
    try:
        info = parse_claim(raw, DRIVER_NAME)
    except KubeError:
        return None
    mine = {d.device for d in info.devices if d.pool == node}
    if not mine:
        return None
    status = raw.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    waits = any(
        r.get("driver") == DRIVER_NAME and r.get("pool") == node and r.get("bindingConditions")
        for r in results
        if isinstance(r, dict)
    )
    decided = set()
    for entry in status.get("devices") or []:
        if not isinstance(entry, dict) or entry.get("driver") != DRIVER_NAME or entry.get("pool") != node:
            continue
        if any(
            isinstance(c, dict) and c.get("type") in (BOUND_CONDITION, FAILED_CONDITION) and c.get("status") == "True"
            for c in entry.get("conditions") or []
        ):
            decided.add(entry.get("device"))
    stamp = str((status.get("allocation") or {}).get("allocationTimestamp") or "")
    return Allocation(info, waits and not mine <= decided, (info.uid, stamp, *sorted(mine)))


@dataclass(frozen=True, slots=True)
class ReservedPod:
    """The pod a claim is reserved for, before it is bound (the node's pod cache has it only then)."""

    namespace: str
    name: str
    uid: str
    phase: str = "Pending"
    created: float = 0.0
    annotations: Mapping[str, str] = field(default_factory=dict)
    containers: Sequence[tuple[str, int]] = ()


class FailedSlots:
    """Slots tainted after a failed programming, each until its time is up (one entry per slot)."""

    def __init__(self, on_change: Callable[[], None], taint_s: float = FAILED_TAINT_S) -> None:
        self._until: dict[str, float] = {}
        self._on_change = on_change
        self._taint_s = taint_s
        self._wake = asyncio.Event()

    def mark(self, slots: Sequence[str]) -> None:
        until = time.monotonic() + self._taint_s
        for slot in slots:
            self._until[slot] = until
        self._wake.set()
        self._on_change()

    def tainted(self) -> frozenset[str]:
        now = time.monotonic()
        return frozenset(s for s, until in self._until.items() if until > now)

    async def run(self) -> None:
        """Lift each taint when its time is up (republishing the slice) until cancelled."""
        while True:
            self._wake.clear()
            timeout = min(self._until.values(), default=time.monotonic() + 3600.0) - time.monotonic()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, timeout)):
                    await self._wake.wait()
            now = time.monotonic()
            expired = [s for s, until in self._until.items() if until <= now]
            for slot in expired:
                del self._until[slot]
            if expired:
                logger.info("slots %s: programming-failed taint lifted", ",".join(sorted(expired)))
                self._on_change()


class AllocationProgrammer:
    """Programs the slots of claims allocated to this node that wait for their binding condition."""

    def __init__(
        self,
        *,
        node: str,
        preparation: ClaimPreparation,
        tracker: ContentTracker,
        writer: StatusWriter,
        exclusive: Callable[[], AbstractAsyncContextManager[None]],
        failed: FailedSlots,
        events: EventSink | None,
        timeout_s: float,
    ) -> None:
        self._node = node
        self._preparation = preparation
        self._tracker = tracker
        self._writer = writer
        self._exclusive = exclusive
        self._failed = failed
        self._events = events
        self._timeout_s = timeout_s
        self._handled: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def parse(self, raw: Mapping[str, Any]) -> Allocation | None:
        return parse_allocation(raw, self._node)

    def replace(self, allocations: list[Allocation | None]) -> None:
        for allocation in allocations:
            self.offer(allocation)

    def event(self, _kind: str, allocation: Allocation | None) -> None:
        self.offer(allocation)

    def offer(self, allocation: Allocation | None) -> None:
        """On the loop: start programming a waiting claim not handled yet."""
        if allocation is None or not allocation.waiting or allocation.key in self._handled:
            return
        self._handled[allocation.key] = None
        while len(self._handled) > MAX_HANDLED:
            self._handled.popitem(last=False)
        task = asyncio.get_running_loop().create_task(self.handle(allocation.info), name="dra-bind")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def handle(self, info: ClaimInfo) -> None:
        """Program the claim's slots, then write the verdict (True or failed) on its device entries."""
        who = shown_claim(info.namespace, info.name)
        pod = ReservedPod(info.namespace, *info.reserved_for[0]) if info.reserved_for else None
        mine = [d for d in info.devices if d.pool == self._node]
        async with self._exclusive():
            before = self._tracker.loaded()
            started = time.monotonic()
            try:
                async with asyncio.timeout(self._timeout_s + 1.0):
                    _devices, targets = await self._preparation.program(
                        info.uid, info, pod, who, time.monotonic() + self._timeout_s
                    )
            except (FpgaSlotError, TimeoutError) as exc:
                await self._fail(info, pod, who, exc)
                return
            slots = [slot for group in targets for slot in group]
            contents = await self._tracker.contents([slot.id for slot in slots], before)
        self._tracker.remember(info.uid, contents)
        by_slot = {c.slot: c for c in contents}
        entries = []
        for device, group in zip(mine, targets, strict=True):  # a whole card: what its first slot says of it
            content = by_slot.get(str(group[0].id))
            ready = Condition(BOUND_CONDITION, True, "Programmed", _ready_message(content))
            entries.append(DeviceStatus(self._node, device.device, (ready,), content.data() if content else {}))
        await self._write(info, entries, who)
        logger.info("%s: slots %s ready in %.1f s", who, ",".join(s.id for s in slots), time.monotonic() - started)

    async def _fail(self, info: ClaimInfo, pod: ReservedPod | None, who: str, exc: BaseException) -> None:
        message = (
            str(exc) if isinstance(exc, FpgaSlotError) else f"{who}: not programmed within {self._timeout_s:.0f} s"
        )
        reason = type(exc).__name__.replace("Error", "Failed") if isinstance(exc, FpgaSlotError) else "Timeout"
        mine = [d for d in info.devices if d.pool == self._node]
        logger.warning("%s: programming at allocation failed (%s); the pod is placed again", who, message)
        offered = self._preparation.devices()
        slots = [str(slot.id) for d in mine if d.device in offered for slot in offered[d.device].slots]
        self._failed.mark(slots)
        failed = Condition(FAILED_CONDITION, True, reason, message)
        await self._write(info, [DeviceStatus(self._node, d.device, (failed,)) for d in mine], who)
        if self._events is not None and pod is not None:
            await self._events.post(
                pod.namespace,
                pod.name,
                pod.uid,
                "FpgaProgrammingFailed",
                f"{message}; slots {','.join(slots)} of node {self._node} are tainted for {FAILED_TAINT_S:.0f} s "
                "and the pod is placed again",
                "Warning",
            )

    async def _write(self, info: ClaimInfo, entries: Sequence[DeviceStatus], who: str) -> None:
        try:
            await asyncio.to_thread(self._writer.apply, info.namespace, info.name, info.uid, entries)
        except FpgaSlotError as exc:
            logger.error("%s: binding verdict not written (%s); the scheduler times out instead", who, exc)


def _ready_message(content: SlotContent | None) -> str:
    if content is None:
        return "slot handed over as it is (no bitstream asked for)"
    return f"holds {content.bitstream} ({'cache hit' if content.cache_hit else 'programmed'})"
