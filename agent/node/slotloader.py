"""Programming slots with a checked bitstream: what the pipeline does once it has decided.

A slot that already holds the accelerator is a hit; the others are programmed in parallel under a
per-slot lock, read back and recorded, with an Event for the pod. A failed or interrupted programming
taints the slot until a background retry (with backoff) succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
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
from agent.programming.base import CardProgrammer, FileProgrammer
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
        image = await self._checked_image(pod, who, entry) if misses else b""
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

    async def _checked_image(self, pod: PodView | None, who: str, entry: CatalogEntry) -> bytes:
        """The entry's image, read and verified before anything is recorded: a bad file changes nothing."""
        try:
            return await asyncio.to_thread(self._read_image, entry)
        except CatalogError as exc:
            message = f"{who}: {exc}"
            if entry.source and isinstance(exc, BitstreamHashError):
                assert self._catalog is not None
                await asyncio.to_thread(self._catalog.remove, entry)
                message += "; it came from a pull, so it is removed from the catalog and pulled again"
            await self.post(pod, "FpgaBitstreamRejected", message, "Warning")
            raise type(exc)(message) from exc

    def holds(self, slot_id: SlotId, entry: CatalogEntry) -> bool:
        """Whether the slot is known to hold ``entry``: reported or recorded, not tainted, no programming under way."""
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
                await self._verify([slot], entry)
            except ProgrammingError as exc:
                self._count_reconfiguration("timeout" if isinstance(exc, ProgrammingTimeout) else "failed")
                message = f"{who}: programming slot {slot.id} with {entry.name} failed: {exc}"
                self._registry.taint(slot.id, f"content unknown after failed programming: {exc}")
                await self.post(pod, "FpgaSlotProgrammingFailed", message, "Warning")
                self._start_recovery([slot], entry)
                raise type(exc)(message) from exc
            except asyncio.CancelledError:
                self._registry.taint(slot.id, f"content unknown: programming with {entry.name} was interrupted")
                self._start_recovery([slot], entry)
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
        """The slot's programmer, given the image's bytes, or the catalog's file for a FileProgrammer."""
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

    async def _verify(self, slots: Sequence[Slot], entry: CatalogEntry) -> None:
        """Read the slots back (one rescan), updating every slot of their cards; ProgrammingError when a slot
        reports something else or cannot be read."""
        try:
            fresh = {s.id: s for s in await self._read_hardware()}
        except DiscoveryError as exc:
            raise ProgrammingError(f"slot {slots[0].id} could not be read back after programming: {exc}") from exc
        cards = {slot.card for slot in slots}
        for other in fresh.values():
            if other.card in cards:
                self._registry.upsert(other)
        for slot in slots:
            now = fresh.get(slot.id)
            if now is None:
                raise ProgrammingError(f"slot {slot.id} vanished while it was programmed")
            if now.loaded is not None and now.loaded != entry.accelerator_id:
                expected = entry.accelerator_id
                raise ProgrammingError(
                    f"slot {slot.id} reports accelerator {now.loaded} after programming, expected {expected}"
                )

    # ------------------------------------------------------------------ whole cards
    def can_program_card(self, slots: Sequence[Slot]) -> bool:
        """Whether ``slots`` (every slot of one card) can be programmed as the whole card by this agent."""
        programmer = self._programmers.get(slots[0].backend) if slots else None
        return isinstance(programmer, CardProgrammer) and programmer.can_program_card(slots)

    def holds_card(self, slots: Sequence[Slot], entry: CatalogEntry) -> bool:
        """Whether the card of ``slots`` holds the whole-card image ``entry`` (every slot reports it as the card's)."""
        states = [self._registry.get(slot.id) for slot in slots]
        return all(s is not None and s.slot.whole_card and self.holds(s.slot.id, entry) for s in states)

    async def load_card(
        self, pod: PodView | None, who: str, entry: CatalogEntry, slots: list[Slot], deadline: float
    ) -> None:
        """Load the whole-card image ``entry`` into the card of ``slots`` (every slot of it) unless it holds it;
        a failure taints every slot and retries in the background."""
        card = slots[0].card
        if self.holds_card(slots, entry):
            await self._card_hit(pod, who, card, slots, entry)
            return
        image = await self._checked_image(pod, who, entry)
        async with self._holding(slots, who, deadline):
            if self.holds_card(slots, entry):
                await self._card_hit(pod, who, card, slots, entry)
                return
            self._count_lookup("miss")
            try:
                took = await self._program_card(slots, entry, image, deadline - time.monotonic())
            except ProgrammingError as exc:
                self._count_reconfiguration("timeout" if isinstance(exc, ProgrammingTimeout) else "failed")
                message = f"{who}: programming card {card} with {entry.name} failed: {exc}"
                for slot in slots:
                    self._registry.taint(slot.id, f"content unknown after failed programming of its card: {exc}")
                await self.post(pod, "FpgaSlotProgrammingFailed", message, "Warning")
                self._start_recovery(slots, entry, card=True)
                raise type(exc)(message) from exc
            except asyncio.CancelledError:
                for slot in slots:
                    self._registry.taint(
                        slot.id, f"content unknown: programming its card with {entry.name} was interrupted"
                    )
                self._start_recovery(slots, entry, card=True)
                raise
        for slot in slots:
            self._registry.record_content(slot.id, entry.name, entry.accelerator_id)
        self._count_reconfiguration("programmed", took)
        await self.post(pod, "FpgaCardProgrammed", f"Programmed card {card} with {entry.name} in {took * 1000:.0f} ms")

    @contextlib.asynccontextmanager
    async def _holding(self, slots: Sequence[Slot], who: str, deadline: float | None) -> AsyncIterator[None]:
        """Every slot's lock, taken in ID order (by ``deadline``, when given) and released on the way out."""
        async with contextlib.AsyncExitStack() as stack:
            for slot in sorted(slots, key=lambda s: s.id):
                lock = self._slot_locks.setdefault(slot.id, asyncio.Lock())
                if deadline is None:
                    await lock.acquire()
                else:
                    await self._acquire(lock, who, slot, deadline)
                stack.callback(lock.release)
            yield

    async def _card_hit(
        self, pod: PodView | None, who: str, card: str, slots: Sequence[Slot], entry: CatalogEntry
    ) -> None:
        for slot in slots:
            self._registry.record_content(slot.id, entry.name, entry.accelerator_id)
        self._count_lookup("hit")
        logger.info("%s: card %s already holds %s, not programming", who, card, entry.name)
        await self.post(pod, "FpgaSlotCacheHit", f"Card {card} already held {entry.name}")

    async def _program_card(self, slots: Sequence[Slot], entry: CatalogEntry, image: bytes, timeout_s: float) -> float:
        """Mark every slot as being programmed, run the card's programmer, read every slot back."""
        if timeout_s <= 0:
            raise ProgrammingTimeout(f"card {slots[0].card}: no time left before the deadline")
        for slot in slots:
            self._registry.begin_programming(slot.id, entry.name, entry.accelerator_id)
        if self._before_programming is not None:
            await self._before_programming()
        programmer = self._programmers[slots[0].backend]
        assert isinstance(programmer, CardProgrammer)
        try:
            took = await programmer.program_card(slots, image, entry.accelerator_id, timeout_s)
        except OSError as exc:
            raise ProgrammingError(f"card {slots[0].card}: {exc}") from exc
        await self._verify(slots, entry)
        return took

    # ------------------------------------------------------------------ recovery
    def _start_recovery(self, slots: Sequence[Slot], entry: CatalogEntry, *, card: bool = False) -> None:
        key = min(slot.id for slot in slots)
        if key not in self._recovering or self._recovering[key].done():
            what = f"card {slots[0].card}" if card else f"slot {key}"
            self._recovering[key] = asyncio.create_task(self._recover(list(slots), entry, card), name=f"recover {what}")

    async def _begin_programming(self, slot_id: SlotId, entry: CatalogEntry) -> None:
        state = self._registry.get(slot_id)
        if state is not None and state.slot.whole_card:
            # Programming a slot of a whole-card image restores the base layout: the other slots' content is gone.
            siblings = [s.slot.id for s in self._registry.snapshot() if s.slot.card == state.slot.card]
            self._registry.forget_contents(siblings)
        self._registry.begin_programming(slot_id, entry.name, entry.accelerator_id)
        if self._before_programming is not None:
            await self._before_programming()

    async def _recover(self, slots: list[Slot], entry: CatalogEntry, card: bool) -> None:
        """Re-program tainted slots (or their card) with the same bitstream until it succeeds or a slot goes."""
        what = f"card {slots[0].card}" if card else f"slot {slots[0].id}"
        delay = RECOVERY_DELAY_S
        while True:
            await asyncio.sleep(delay)
            states = [self._registry.get(slot.id) for slot in slots]
            if any(s is None for s in states) or all(s is not None and s.taint is None for s in states):
                return
            try:
                image = await asyncio.to_thread(self._read_image, entry)
                async with self._holding(slots, what, None):
                    if card:
                        took = await self._program_card(slots, entry, image, self._timeout_s)
                    else:
                        await self._begin_programming(slots[0].id, entry)
                        took = await self._run_programmer(slots[0], entry, image, self._timeout_s)
                        await self._verify(slots, entry)
            except FpgaSlotError as exc:
                if isinstance(exc, ProgrammingError):
                    self._count_reconfiguration("timeout" if isinstance(exc, ProgrammingTimeout) else "failed")
                delay = min(delay * 2, RECOVERY_DELAY_MAX_S)
                logger.warning("%s: recovery programming failed, retrying in %.0f s: %s", what, delay, exc)
                continue
            self._count_reconfiguration("programmed", took)
            for slot in slots:
                self._registry.record_content(slot.id, entry.name, entry.accelerator_id)
            logger.info("%s recovered: programmed with %s again, Healthy", what, entry.name)
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
