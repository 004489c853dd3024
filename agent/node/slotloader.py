"""Programming slots with a checked bitstream: what the pipeline does once it has decided.

Given a catalog entry already checked against every slot (``agent.node.reconfigure``):

1. a slot that already holds the accelerator is left alone (a hit: that is the cache);
2. the others are programmed in parallel, one programming per slot at a time (a lock
   per slot, waited for no longer than the caller's deadline);
3. what the slot reports afterwards is read back and recorded; a Kubernetes Event is
   posted for the pod.

A failed or interrupted programming taints the slot (Unhealthy, content unknown) until a
later programming succeeds; a background task retries that with backoff.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from agent.errors import (
    BitstreamHashError,
    CatalogError,
    DiscoveryError,
    FpgaSlotError,
    ProgrammingError,
    ProgrammingTimeout,
)
from agent.node.metrics import AgentMetrics
from agent.node.pods import EventSink, PodView
from agent.programming.base import FileProgrammer
from agent.programming.catalog import Catalog, CatalogEntry
from agent.slots import Slot, SlotId, SlotRegistry

logger = logging.getLogger(__name__)

#: Background re-programming of a tainted slot: first delay and ceiling.
RECOVERY_DELAY_S = 2.0
RECOVERY_DELAY_MAX_S = 300.0


class Programmer(Protocol):
    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float: ...


#: Re-reads what the hardware reports for the slots (a rescan of the backend).
HardwareReader = Callable[[], Awaitable[Sequence[Slot]]]


class SlotLoader:
    """Loads checked catalog entries into slots: hits, per-slot locks, verification, taint and recovery."""

    def __init__(
        self,
        registry: SlotRegistry,
        *,
        catalog: Catalog | None,
        programmers: Mapping[str, Programmer],
        read_hardware: HardwareReader,
        events: EventSink | None,
        timeout_s: float,
        metrics: AgentMetrics | None,
        before_programming: Callable[[], Awaitable[None]] | None,
    ) -> None:
        self._registry = registry
        self._catalog = catalog
        self._programmers = programmers
        self._read_hardware = read_hardware
        self._events = events
        self._timeout_s = timeout_s
        self._metrics = metrics
        self._before_programming = before_programming
        self._slot_locks: dict[SlotId, asyncio.Lock] = {}
        self._recovering: dict[SlotId, asyncio.Task[None]] = {}

    def can_program(self, slot: Slot) -> bool:
        """Whether this agent has a programmer for the slot's backend that can program it."""
        programmer = self._programmers.get(slot.backend)
        return programmer is not None and (not isinstance(programmer, FileProgrammer) or programmer.can_program(slot))

    async def load(
        self, pod: PodView | None, who: str, entry: CatalogEntry, slots: list[Slot], deadline: float
    ) -> None:
        hits: list[Slot] = []
        misses: list[Slot] = []
        for slot in slots:
            (hits if self.holds(slot.id, entry) else misses).append(slot)
        image = b""
        if misses:
            # Read and verify the image before anything is recorded: a bad file changes nothing.
            try:
                image = await asyncio.to_thread(self._read_image, entry)
            except CatalogError as exc:
                message = f"{who}: {exc}"
                if entry.source and isinstance(exc, BitstreamHashError):
                    # A pulled file that no longer matches: taken out, so the kubelet's next attempt pulls it anew.
                    assert self._catalog is not None
                    await asyncio.to_thread(self._catalog.remove, entry)
                    message += "; it came from a pull, so it is removed from the catalog and pulled again"
                await self.post(pod, "FpgaBitstreamRejected", message, "Warning")
                raise type(exc)(message) from exc
        for slot in hits:
            await self._hit(pod, who, slot, entry)
        if not misses:
            return
        results = await asyncio.gather(
            *(self._program_one(pod, who, entry, image, slot, deadline) for slot in misses),
            return_exceptions=True,
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        for failure in failures:
            if not isinstance(failure, FpgaSlotError):
                raise failure
        if failures:
            raise failures[0]

    def holds(self, slot_id: SlotId, entry: CatalogEntry) -> bool:
        """Whether the slot is known to hold ``entry``: reported or recorded, not tainted, no programming under
        way (another start may be loading something else into it: until that ends, its content is unknown)."""
        state = self._registry.get(slot_id)
        return (
            state is not None
            and state.programming is None
            and state.taint is None
            and state.accelerator_id == entry.accelerator_id
        )

    async def _hit(self, pod: PodView | None, who: str, slot: Slot, entry: CatalogEntry) -> None:
        self._registry.record_content(slot.id, entry.name, entry.accelerator_id)
        self._count_lookup("hit")
        logger.info("%s: slot %s already holds %s, not programming", who, slot.id, entry.name)
        await self.post(pod, "FpgaSlotCacheHit", f"Slot {slot.id} already held {entry.name}")

    def _read_image(self, entry: CatalogEntry) -> bytes:
        assert self._catalog is not None
        return self._catalog.read_image(entry)

    async def _program_one(
        self, pod: PodView | None, who: str, entry: CatalogEntry, image: bytes, slot: Slot, deadline: float
    ) -> None:
        lock = self._slot_locks.setdefault(slot.id, asyncio.Lock())
        await self._acquire(lock, who, slot, deadline)
        try:
            if self.holds(slot.id, entry):  # a programming that held the lock loaded this very bitstream
                await self._hit(pod, who, slot, entry)
                return
            self._count_lookup("miss")
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise ProgrammingTimeout(f"slot {slot.id}: no time left before the deadline")
                await self._begin_programming(slot.id, entry)
                took = await self._run_programmer(slot, entry, image, remaining)
                await self._verify(slot, entry)
            except ProgrammingError as exc:
                self._count_reconfiguration("timeout" if isinstance(exc, ProgrammingTimeout) else "failed")
                message = f"{who}: programming slot {slot.id} with {entry.name} failed: {exc}"
                self._registry.taint(slot.id, f"content unknown after failed programming: {exc}")
                await self.post(pod, "FpgaSlotProgrammingFailed", message, "Warning")
                self._start_recovery(slot.id, entry)
                raise type(exc)(message) from exc
            except asyncio.CancelledError:
                # Interrupted half-way (the agent stops, the call was cancelled): the content is unknown.
                self._registry.taint(slot.id, f"content unknown: programming with {entry.name} was interrupted")
                self._start_recovery(slot.id, entry)
                raise
            self._registry.record_content(slot.id, entry.name, entry.accelerator_id)
            self._count_reconfiguration("programmed", took)
            await self.post(
                pod,
                "FpgaSlotProgrammed",
                f"Programmed slot {slot.id} with {entry.name} in {took * 1000:.0f} ms",
            )
        finally:
            lock.release()

    async def _run_programmer(self, slot: Slot, entry: CatalogEntry, image: bytes, timeout_s: float) -> float:
        """The slot's programmer, given the image's bytes, or the catalog's file (just verified by reading
        ``image``) when it hands the file to a tool."""
        programmer = self._programmers[slot.backend]
        try:
            if isinstance(programmer, FileProgrammer):
                assert self._catalog is not None
                image_file = self._catalog.directory / entry.file
                return await programmer.program_file(slot, image_file, entry.accelerator_id, timeout_s)
            return await programmer.program(slot, image, entry.accelerator_id, timeout_s)
        except OSError as exc:  # a programmer's own I/O (staging the image, its scratch space): a failed programming
            raise ProgrammingError(f"slot {slot.id}: {exc}") from exc

    async def _acquire(self, lock: asyncio.Lock, who: str, slot: Slot, deadline: float) -> None:
        """Wait for the slot's lock, but not past the deadline (another start may be programming it)."""
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                await lock.acquire()
        except TimeoutError:
            raise ProgrammingTimeout(
                f"{who}: slot {slot.id} is still being programmed for another start; no time left before the deadline"
            ) from None

    async def _verify(self, slot: Slot, entry: CatalogEntry) -> None:
        """Read the slot back; a slot that reports something else, or cannot be read, is a failed programming."""
        try:
            fresh = {s.id: s for s in await self._read_hardware()}
        except DiscoveryError as exc:
            raise ProgrammingError(f"slot {slot.id} could not be read back after programming: {exc}") from exc
        now = fresh.get(slot.id)
        if now is None:
            raise ProgrammingError(f"slot {slot.id} vanished while it was programmed")
        self._registry.upsert(now)
        if now.loaded is not None and now.loaded != entry.accelerator_id:
            raise ProgrammingError(
                f"slot {slot.id} reports accelerator {now.loaded} after programming, expected {entry.accelerator_id}"
            )

    # ------------------------------------------------------------------ recovery
    def _start_recovery(self, slot_id: SlotId, entry: CatalogEntry) -> None:
        if slot_id not in self._recovering or self._recovering[slot_id].done():
            self._recovering[slot_id] = asyncio.create_task(
                self._recover(slot_id, entry), name=f"recover slot {slot_id}"
            )

    async def _begin_programming(self, slot_id: SlotId, entry: CatalogEntry) -> None:
        self._registry.begin_programming(slot_id, entry.name, entry.accelerator_id)
        if self._before_programming is not None:
            await self._before_programming()

    async def _recover(self, slot_id: SlotId, entry: CatalogEntry) -> None:
        """Re-program a tainted slot with the same bitstream until it succeeds or the slot goes."""
        delay = RECOVERY_DELAY_S
        while True:
            await asyncio.sleep(delay)
            state = self._registry.get(slot_id)
            if state is None or state.taint is None:
                return
            try:
                image = await asyncio.to_thread(self._read_image, entry)
                async with self._slot_locks.setdefault(slot_id, asyncio.Lock()):
                    await self._begin_programming(slot_id, entry)
                    took = await self._run_programmer(state.slot, entry, image, self._timeout_s)
                    await self._verify(state.slot, entry)
            except FpgaSlotError as exc:
                if isinstance(exc, ProgrammingError):
                    self._count_reconfiguration("timeout" if isinstance(exc, ProgrammingTimeout) else "failed")
                delay = min(delay * 2, RECOVERY_DELAY_MAX_S)
                logger.warning("slot %s: recovery programming failed, retrying in %.0f s: %s", slot_id, delay, exc)
                continue
            self._count_reconfiguration("programmed", took)
            self._registry.record_content(slot_id, entry.name, entry.accelerator_id)
            logger.info("slot %s recovered: programmed with %s again, Healthy", slot_id, entry.name)
            return

    async def close(self) -> None:
        """Cancel background recoveries (on shutdown)."""
        for task in self._recovering.values():
            task.cancel()
        await asyncio.gather(*self._recovering.values(), return_exceptions=True)
        self._recovering.clear()

    # ------------------------------------------------------------------- metrics
    def _count_lookup(self, result: str) -> None:
        if self._metrics is not None:
            self._metrics.cache_lookups.labels(result=result).inc()

    def _count_reconfiguration(self, result: str, seconds: float | None = None) -> None:
        if self._metrics is not None:
            self._metrics.reconfigurations.labels(result=result).inc()
            if seconds is not None:
                self._metrics.reconfiguration_seconds.observe(seconds)

    # -------------------------------------------------------------------- events
    async def post(self, pod: PodView | None, reason: str, message: str, type: str = "Normal") -> None:
        if self._events is not None and pod is not None:
            await self._events.post(pod.namespace, pod.name, pod.uid, reason, message, type)
