"""Programming slots with a checked bitstream: hits, per-slot locks, read-back, Events; a failed or interrupted
programming taints the slot until a background retry (with backoff) succeeds."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence

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
from agent.programming.base import CardProgrammer, FileProgrammer, Programmer
from agent.programming.catalog import Catalog
from agent.programming.catalogentry import CatalogEntry
from agent.slots.model import Slot, SlotId
from agent.slots.registry import SlotRegistry

logger = logging.getLogger(__name__)

#: Background re-programming of a tainted slot: first delay and ceiling.
RECOVERY_DELAY_S = 2.0
RECOVERY_DELAY_MAX_S = 300.0


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
        self._metrics = metrics or AgentMetrics()  # without the agent's: counted where nobody reads them
        self._before_programming = before_programming
        self._slot_locks: dict[SlotId, asyncio.Lock] = {}
        self._recovering: dict[SlotId, asyncio.Task[None]] = {}

    def can_program(self, slot: Slot) -> bool:
        """Whether this agent has a programmer for the slot's backend that can program it."""
        programmer = self._programmers.get(slot.backend)
        return programmer is not None and (not isinstance(programmer, FileProgrammer) or programmer.can_program(slot))

    async def load(
        self, pod: PodView | None, who: str, entry: CatalogEntry, slots: list[Slot], deadline: float, card: bool = False
    ) -> None:
        """Load ``entry`` into each of ``slots`` (in parallel) not holding it, or with ``card`` into their whole card
        unless it holds it; a failure taints the slots programmed and retries in the background."""
        groups = [slots] if card else [[slot] for slot in slots]
        misses = [group for group in groups if not self.holds(group, entry, card)]
        image = await self._checked_image(pod, who, entry) if misses else b""
        for group in groups:
            if group not in misses:
                await self._hit(pod, who, group, entry, card)
        results = await asyncio.gather(
            *(self._program_locked(pod, who, entry, image, group, deadline, card) for group in misses),
            return_exceptions=True,
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:  # an error outside the tree first: it is a bug
            raise next((f for f in failures if not isinstance(f, FpgaSlotError)), failures[0])

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

    def holds(self, slots: Sequence[Slot], entry: CatalogEntry, card: bool = False) -> bool:
        """Whether the slots are known (not tainted, not being programmed) to hold ``entry``, with ``card`` as the
        card's image."""
        states = [self._registry.get(slot.id) for slot in slots]
        return all(
            state is not None
            and state.programming is None
            and state.taint is None
            and state.accelerator_id == entry.accelerator_id
            and (state.slot.whole_card or not card)
            for state in states
        )

    def _record(self, slots: Sequence[Slot], entry: CatalogEntry) -> None:
        for slot in slots:
            self._registry.record_content(slot.id, entry.name, entry.accelerator_id)

    async def _hit(self, pod: PodView | None, who: str, slots: Sequence[Slot], entry: CatalogEntry, card: bool) -> None:
        what = _what(slots, card)
        self._record(slots, entry)
        self._metrics.cache_lookups.labels(result="hit").inc()
        logger.info("%s: %s already holds %s, not programming", who, what, entry.name)
        await self.post(pod, "FpgaSlotCacheHit", f"{what[0].upper()}{what[1:]} already held {entry.name}")

    def _read_image(self, entry: CatalogEntry) -> bytes:
        assert self._catalog is not None
        return self._catalog.read_image(entry)

    async def _program_locked(
        self,
        pod: PodView | None,
        who: str,
        entry: CatalogEntry,
        image: bytes,
        slots: Sequence[Slot],
        deadline: float,
        card: bool,
    ) -> None:
        """Program one slot, or (``card``) a whole card, under the slots' locks; a failure taints them."""
        what = _what(slots, card)
        async with self._holding(slots, who, deadline):
            # a programming that held the locks may have loaded this very bitstream
            if self.holds(slots, entry, card):
                await self._hit(pod, who, slots, entry, card)
                return
            self._metrics.cache_lookups.labels(result="miss").inc()
            try:
                took = await self._program(slots, entry, image, deadline - time.monotonic(), card)
            except ProgrammingError as exc:
                self._count(exc)
                message = f"{who}: programming {what} with {entry.name} failed: {exc}"
                of_card = " of its card" if card else ""
                self._taint(slots, entry, card, f"content unknown after failed programming{of_card}: {exc}")
                await self.post(pod, "FpgaSlotProgrammingFailed", message, "Warning")
                raise type(exc)(message) from exc
            except asyncio.CancelledError:
                its_card = "its card " if card else ""
                self._taint(
                    slots, entry, card, f"content unknown: programming {its_card}with {entry.name} was interrupted"
                )
                raise
            self._record(slots, entry)
            self._count("programmed", took)
            await self.post(
                pod,
                "FpgaCardProgrammed" if card else "FpgaSlotProgrammed",
                f"Programmed {what} with {entry.name} in {took * 1000:.0f} ms",
            )

    async def _program(
        self, slots: Sequence[Slot], entry: CatalogEntry, image: bytes, timeout_s: float, card: bool
    ) -> float:
        """Mark the slots as being programmed, run their programmer (a FileProgrammer gets the catalog's file), read
        every slot back."""
        what = _what(slots, card)
        if timeout_s <= 0:
            raise ProgrammingTimeout(f"{what}: no time left before the deadline")
        state = self._registry.get(slots[0].id)
        if not card and state is not None and state.slot.whole_card:
            # Programming a slot of a whole-card image restores the base layout: the other slots' content is gone.
            self._registry.forget_contents(
                [s.slot.id for s in self._registry.snapshot() if s.slot.card == state.slot.card]
            )
        for slot in slots:
            self._registry.begin_programming(slot.id, entry.name, entry.accelerator_id)
        if self._before_programming is not None:
            await self._before_programming()
        programmer = self._programmers[slots[0].backend]
        try:
            if card:
                assert isinstance(programmer, CardProgrammer)
                took = await programmer.program_card(slots, image, entry.accelerator_id, timeout_s)
            elif isinstance(programmer, FileProgrammer):
                assert self._catalog is not None
                image_file = self._catalog.directory / entry.file
                took = await programmer.program_file(slots[0], image_file, entry.accelerator_id, timeout_s)
            else:
                took = await programmer.program(slots[0], image, entry.accelerator_id, timeout_s)
        except OSError as exc:  # a programmer's own I/O (staging the image, its scratch space): a failed programming
            raise ProgrammingError(f"{what}: {exc}") from exc
        await self._verify(slots, entry)
        return took

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

    @contextlib.asynccontextmanager
    async def _holding(self, slots: Sequence[Slot], who: str, deadline: float | None) -> AsyncIterator[None]:
        """Every slot's lock, taken in ID order (by ``deadline``, when given: else ProgrammingTimeout, as another
        start may be programming it) and released on the way out."""
        async with contextlib.AsyncExitStack() as stack:
            for slot in sorted(slots, key=lambda s: s.id):
                lock = self._slot_locks.setdefault(slot.id, asyncio.Lock())
                try:
                    async with asyncio.timeout(None if deadline is None else max(0.0, deadline - time.monotonic())):
                        await lock.acquire()
                except TimeoutError:
                    raise ProgrammingTimeout(
                        f"{who}: slot {slot.id} is still being programmed for another start; "
                        "no time left before the deadline"
                    ) from None
                stack.callback(lock.release)
            yield

    # ------------------------------------------------------------------ recovery
    def _taint(self, slots: Sequence[Slot], entry: CatalogEntry, card: bool, reason: str) -> None:
        """The slots' content is unknown (Unhealthy): re-program them with ``entry`` in the background."""
        for slot in slots:
            self._registry.taint(slot.id, reason)
        key = min(slot.id for slot in slots)
        if key not in self._recovering or self._recovering[key].done():
            self._recovering[key] = asyncio.create_task(
                self._recover(list(slots), entry, card), name=f"recover {_what(slots, card)}"
            )

    async def _recover(self, slots: list[Slot], entry: CatalogEntry, card: bool) -> None:
        """Re-program tainted slots (or their card) with the same bitstream until it succeeds or a slot goes."""
        what = _what(slots, card)
        delay = RECOVERY_DELAY_S
        while True:
            await asyncio.sleep(delay)
            states = [self._registry.get(slot.id) for slot in slots]
            if any(s is None for s in states) or all(s is not None and s.taint is None for s in states):
                return
            try:
                image = await asyncio.to_thread(self._read_image, entry)
                async with self._holding(slots, what, None):
                    took = await self._program(slots, entry, image, self._timeout_s, card)
            except FpgaSlotError as exc:
                if isinstance(exc, ProgrammingError):
                    self._count(exc)
                delay = min(delay * 2, RECOVERY_DELAY_MAX_S)
                logger.warning("%s: recovery programming failed, retrying in %.0f s: %s", what, delay, exc)
                continue
            self._count("programmed", took)
            self._record(slots, entry)
            logger.info("%s recovered: programmed with %s again, Healthy", what, entry.name)
            return

    async def close(self) -> None:
        """Cancel background recoveries (on shutdown)."""
        for task in self._recovering.values():
            task.cancel()
        await asyncio.gather(*self._recovering.values(), return_exceptions=True)
        self._recovering.clear()

    # ------------------------------------------------------------------- metrics
    def _count(self, result: str | ProgrammingError, seconds: float | None = None) -> None:
        """One reconfiguration: ``programmed`` in ``seconds``, or the error that failed it (a timeout or not)."""
        if isinstance(result, ProgrammingError):
            result = "timeout" if isinstance(result, ProgrammingTimeout) else "failed"
        self._metrics.reconfigurations.labels(result=result).inc()
        if seconds is not None:
            self._metrics.reconfiguration_seconds.observe(seconds)

    # -------------------------------------------------------------------- events
    async def post(self, pod: PodView | None, reason: str, message: str, type: str = "Normal") -> None:
        if self._events is not None and pod is not None:
            await self._events.post(pod.namespace, pod.name, pod.uid, reason, message, type)


def _what(slots: Sequence[Slot], card: bool) -> str:
    return f"card {slots[0].card}" if card else f"slot {slots[0].id}"
