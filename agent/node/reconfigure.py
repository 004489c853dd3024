"""Reconfiguration at PreStartContainer: find the pod, program what it asked for.

Allocate carries only device IDs; at PreStartContainer the kubelet's pod-resources
API names the pod and container holding them. From there:

1. read the pod's annotation (``example.com/fpga-bitstream``, overridden per container
   by ``example.com/fpga-bitstream.<container>``) from the node's pod cache;
2. resolve the name in the node's catalog (never as a path) and check the platform
   of every slot and the file's sha256, before anything is touched;
3. program every slot that does not already hold the accelerator (a hit skips the
   work: that is the cache), cards in parallel, one slot per card at a time;
4. verify what the slot reports afterwards and record it; post a Kubernetes Event.

Everything happens inside a deadline well below the kubelet's 30 s. A failed or
timed-out programming taints the slot (Unhealthy, content unknown) until a later
programming succeeds; the agent retries that in the background with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from agent.errors import (
    BitstreamHashError,
    CatalogError,
    DiscoveryError,
    FpgaSlotError,
    KubeletError,
    PlatformMismatch,
    PodLookupError,
    ProgrammingError,
    ProgrammingTimeout,
    shown,
)
from agent.node.metrics import AgentMetrics
from agent.programming.base import FileProgrammer
from agent.programming.catalog import Catalog, CatalogEntry, check_platform
from agent.slots import Slot, SlotId, SlotRegistry

logger = logging.getLogger(__name__)

ANNOTATION = "example.com/fpga-bitstream"
#: How long PreStartContainer waits for the pod watch to deliver a pod it does not know yet.
POD_WAIT_S = 2.0
#: How long GetPreferredAllocation waits for the watch to deliver the pod being admitted.
PENDING_POD_WAIT_S = 0.5
#: How often holders are checked against pod-resources (besides pod deletion events).
RECONCILE_INTERVAL_S = 30.0
#: A holder allocated this recently may not show in pod-resources yet: keep it.
RECONCILE_GRACE_S = 10.0
#: Background re-programming of a tainted slot: first delay and ceiling.
RECOVERY_DELAY_S = 2.0
RECOVERY_DELAY_MAX_S = 300.0


class PodView(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def phase(self) -> str: ...
    @property
    def created(self) -> float: ...
    @property
    def annotations(self) -> Mapping[str, str]: ...
    @property
    def containers(self) -> Sequence[tuple[str, int]]: ...


class PodDirectory(Protocol):
    """This node's pods as the API server knows them (a watch-fed cache)."""

    def get(self, namespace: str, name: str) -> PodView | None: ...
    def pods(self) -> Sequence[PodView]: ...
    async def wait_pod(self, namespace: str, name: str, timeout_s: float) -> PodView | None: ...
    async def wait_until(self, predicate: Callable[[list[Any]], bool], timeout_s: float) -> bool: ...


class EventSink(Protocol):
    async def post(
        self, namespace: str, pod_name: str, pod_uid: str, reason: str, message: str, type: str = "Normal"
    ) -> None: ...


class Programmer(Protocol):
    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float: ...


class ContainerFinder(Protocol):
    async def find_container(self, device_ids: Sequence[str]) -> ContainerRefLike | None: ...
    async def list_containers(self) -> Sequence[ContainerRefLike]: ...


class ContainerRefLike(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def pod(self) -> str: ...
    @property
    def container(self) -> str: ...
    @property
    def device_ids(self) -> frozenset[str]: ...


#: Re-reads what the hardware reports for the slots (a rescan of the backend).
HardwareReader = Callable[[], Awaitable[Sequence[Slot]]]
#: Makes a bitstream the cluster declares present in the catalog before it is resolved:
#: ``(pod, name, platform of the slots or None, deadline)``; raises CatalogError (nothing is changed then).
BitstreamFetcher = Callable[[PodView | None, str, str | None, float], Awaitable[None]]


def wanted_bitstream(pod: PodView, container: str) -> str | None:
    """The bitstream name a container asks for: its own annotation, else the pod's."""
    return pod.annotations.get(f"{ANNOTATION}.{container}") or pod.annotations.get(ANNOTATION) or None


class Reconfigurer:
    """Implements the device plugin's ContainerHooks."""

    def __init__(
        self,
        registry: SlotRegistry,
        containers: ContainerFinder,
        *,
        pods: PodDirectory | None,
        catalog: Catalog | None,
        programmers: Mapping[str, Programmer],
        read_hardware: HardwareReader,
        events: EventSink | None,
        timeout_s: float,
        metrics: AgentMetrics | None = None,
        before_programming: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``before_programming`` runs after a slot is marked as being programmed and before the
        hardware is touched: the agent writes its checkpoint there, so that a kill half-way leaves
        the slot's content unknown, never the old one believed."""
        self._before_programming = before_programming
        #: Pulls a declared bitstream that is not in the catalog yet (set by the wiring when the cluster's
        #: FpgaBitstreams are watched); without it only the local catalog counts.
        self.fetch_bitstream: BitstreamFetcher | None = None
        #: The accelerator id the cluster declares for a bitstream name (None: not declared), so that a slot
        #: already holding a declared bitstream the catalog lacks is still preferred.
        self.declared_accelerator: Callable[[str], str | None] | None = None
        self._loading: Counter[str] = Counter()
        self._registry = registry
        self._containers = containers
        self._pods = pods
        self._catalog = catalog
        self._programmers = programmers
        self._read_hardware = read_hardware
        self._events = events
        self._timeout_s = timeout_s
        self._metrics = metrics
        self._slot_locks: dict[SlotId, asyncio.Lock] = {}
        self._recovering: dict[SlotId, asyncio.Task[None]] = {}
        self._reconcile_now = asyncio.Event()

    # --------------------------------------------------------- PreStartContainer
    async def prepare(self, device_ids: list[str]) -> None:
        """Find the container holding ``device_ids`` and load its bitstream into them."""
        deadline = time.monotonic() + self._timeout_s
        ref = await self._find(device_ids)
        if ref is None:
            return
        slot_ids = [SlotId(i) for i in device_ids]
        self._registry.set_holder(slot_ids, ref.namespace, ref.pod, ref.container)
        if self._pods is None:
            return
        who = f"pod {ref.namespace}/{ref.pod} container {ref.container} (slots {','.join(device_ids)})"
        # The kubelet may start a container a moment before the pod watch delivers the pod.
        pod = await self._pods.wait_pod(ref.namespace, ref.pod, min(POD_WAIT_S, max(0.0, deadline - time.monotonic())))
        if pod is None:
            raise PodLookupError(f"{who}: the pod is not known to this node's pod cache (API server)")
        name = wanted_bitstream(pod, ref.container)
        if name is None:
            logger.info("%s: no bitstream requested, slots %s handed over as they are", who, ",".join(device_ids))
            return
        await self.load_many(pod, {name: slot_ids}, who, deadline)

    async def load_many(
        self, pod: PodView | None, wanted: Mapping[str, list[SlotId]], who: str, deadline: float
    ) -> None:
        """Put each bitstream into its slots (those holding it already are left alone), by ``deadline``.

        Every bitstream is checked (catalog, platform, programmer) before any slot is touched: a bad
        request changes nothing. Events go to ``pod`` when there is one. Raises the error tree's
        exceptions, naming ``who``."""
        names = list(wanted)
        self._loading.update(names)
        try:
            await self._fetch(pod, wanted, who, deadline)
            await self._check_and_load(pod, wanted, who, deadline)
        finally:
            self._loading.subtract(names)
            self._loading = +self._loading

    def loading(self) -> set[str]:
        """Bitstreams that calls in flight are fetching, checking or programming (not to be evicted)."""
        return set(self._loading)

    async def _fetch(self, pod: PodView | None, wanted: Mapping[str, list[SlotId]], who: str, deadline: float) -> None:
        """Have every declared bitstream pulled first (when the wiring set a fetcher); CatalogError naming ``who``."""
        if self.fetch_bitstream is None:
            return
        for name, slot_ids in wanted.items():
            platforms = {s.slot.platform for s in map(self._registry.get, slot_ids) if s is not None}
            try:
                await self.fetch_bitstream(pod, name, platforms.pop() if len(platforms) == 1 else None, deadline)
            except CatalogError as exc:
                raise type(exc)(f"{who}: {exc}") from exc

    async def _check_and_load(
        self, pod: PodView | None, wanted: Mapping[str, list[SlotId]], who: str, deadline: float
    ) -> None:
        checked = []
        for name, slot_ids in wanted.items():
            try:
                checked.append(self._check(name, slot_ids, who))
            except CatalogError as exc:
                await self._post(pod, "FpgaBitstreamRejected", str(exc), "Warning")
                raise
        for entry, slots in checked:
            await self._load(pod, who, entry, slots, deadline)

    async def _find(self, device_ids: list[str]) -> ContainerRefLike | None:
        """The container holding the slots; None only when pods cannot be read anyway."""
        try:
            ref = await self._containers.find_container(device_ids)
        except KubeletError as exc:
            if self._pods is None:
                logger.warning("slots %s: holder unknown (%s)", ",".join(device_ids), exc)
                return None
            raise PodLookupError(
                f"slots {','.join(device_ids)}: cannot ask the kubelet which pod holds them: {exc}"
            ) from exc
        if ref is None:
            if self._pods is None:
                logger.warning("slots %s: no container holds them in pod-resources yet", ",".join(device_ids))
                return None
            raise PodLookupError(f"slots {','.join(device_ids)}: no pod holds them in the kubelet's pod-resources")
        return ref

    def _check(self, name: str, slot_ids: list[SlotId], who: str) -> tuple[CatalogEntry, list[Slot]]:
        """Resolve the bitstream and check it fits every slot; raises CatalogError, changes nothing."""
        if self._catalog is None:
            raise CatalogError(f"{who} asks for bitstream {shown(name)} but this node has no bitstream catalog")
        try:
            entry = self._catalog.resolve(name)
        except CatalogError as exc:
            raise type(exc)(f"{who}: {exc}") from exc
        slots = []
        for slot_id in slot_ids:
            state = self._registry.get(slot_id)
            if state is None:
                raise PodLookupError(f"{who}: slot {slot_id} vanished before it could be programmed")
            try:
                check_platform(entry, state.slot)
            except PlatformMismatch as exc:
                raise PlatformMismatch(f"{who}: {exc}") from exc
            programmer = self._programmers.get(state.slot.backend)
            if programmer is None or (
                isinstance(programmer, FileProgrammer) and not programmer.can_program(state.slot)
            ):
                raise CatalogError(f"{who}: slot {slot_id} ({state.slot.backend}) cannot be programmed by this agent")
            slots.append(state.slot)
        return entry, slots

    async def _load(
        self, pod: PodView | None, who: str, entry: CatalogEntry, slots: list[Slot], deadline: float
    ) -> None:
        hits: list[Slot] = []
        misses: list[Slot] = []
        for slot in slots:
            (hits if self._holds(slot.id, entry) else misses).append(slot)
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
                await self._post(pod, "FpgaBitstreamRejected", message, "Warning")
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

    def _holds(self, slot_id: SlotId, entry: CatalogEntry) -> bool:
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
        await self._post(pod, "FpgaSlotCacheHit", f"Slot {slot.id} already held {entry.name}")

    def _read_image(self, entry: CatalogEntry) -> bytes:
        assert self._catalog is not None
        return self._catalog.read_image(entry)

    async def _program_one(
        self, pod: PodView | None, who: str, entry: CatalogEntry, image: bytes, slot: Slot, deadline: float
    ) -> None:
        lock = self._slot_locks.setdefault(slot.id, asyncio.Lock())
        await self._acquire(lock, who, slot, deadline)
        try:
            if self._holds(slot.id, entry):  # a programming that held the lock loaded this very bitstream
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
                await self._post(pod, "FpgaSlotProgrammingFailed", message, "Warning")
                self._start_recovery(slot.id, entry)
                raise type(exc)(message) from exc
            except asyncio.CancelledError:
                # Interrupted half-way (the agent stops, the call was cancelled): the content is unknown.
                self._registry.taint(slot.id, f"content unknown: programming with {entry.name} was interrupted")
                self._start_recovery(slot.id, entry)
                raise
            self._registry.record_content(slot.id, entry.name, entry.accelerator_id)
            self._count_reconfiguration("programmed", took)
            await self._post(
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
        if isinstance(programmer, FileProgrammer):
            assert self._catalog is not None
            image_file = self._catalog.directory / entry.file
            return await programmer.program_file(slot, image_file, entry.accelerator_id, timeout_s)
        return await programmer.program(slot, image, entry.accelerator_id, timeout_s)

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

    # ----------------------------------------------------------------- release
    async def reconcile(self) -> None:
        """Release slots whose holder is gone; learn holders the kubelet reports (device-plugin mode).

        There is no Deallocate: a slot is free again when no container holds it in
        pod-resources. The bitstream stays loaded (that is the cache). In DRA mode the
        prepared claims hold the slots (``agent.dra.claimprep``) and this is not run.
        """
        refs = await self._containers.list_containers()
        held: set[str] = set()
        for ref in refs:
            held |= ref.device_ids
            known = [SlotId(i) for i in ref.device_ids if self._registry.get(SlotId(i)) is not None]
            states = [self._registry.get(i) for i in known]
            if any(
                s is not None and (s.holder is None or (s.holder.namespace, s.holder.pod) != (ref.namespace, ref.pod))
                for s in states
            ):
                self._registry.set_holder(known, ref.namespace, ref.pod, ref.container)
        now = time.time()
        gone = [
            slot_id
            for slot_id, holder in self._registry.holders().items()
            if slot_id not in held and now - holder.allocated_at > RECONCILE_GRACE_S
        ]
        if gone:
            logger.info("released slots %s: their holders are gone", ",".join(sorted(gone)))
            self._registry.release(gone)

    def request_reconcile(self) -> None:
        """Reconcile soon (e.g. after a pod was deleted)."""
        self._reconcile_now.set()

    async def run_reconcile(self, interval_s: float = RECONCILE_INTERVAL_S) -> None:
        """Reconcile periodically and on request, until cancelled."""
        while True:
            try:
                await self.reconcile()
            except KubeletError as exc:
                logger.warning("reconcile with pod-resources skipped: %s", exc)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval_s):
                    await self._reconcile_now.wait()
            self._reconcile_now.clear()

    # ---------------------------------------------------- GetPreferredAllocation
    async def wanted_accelerator(self) -> str | None:
        """The accelerator of the pod being admitted, when it can be told without doubt.

        Candidates: this node's pending pods that request our resource and hold no slot
        yet. The guess is trusted only when every candidate container asks for the same
        bitstream; otherwise the neutral policy applies.
        """
        if self._pods is None or self._catalog is None:
            return None

        def asks_for_slots(pod: PodView) -> bool:
            return pod.phase == "Pending" and any(n > 0 for _, n in pod.containers)

        pending = [pod for pod in self._pods.pods() if asks_for_slots(pod)]
        if not pending:
            # The kubelet asks only while admitting a pod that requests our slots: none known means
            # the watch has not delivered it yet. Wait a moment for it rather than choose blind.
            if not await self._pods.wait_until(lambda pods: any(map(asks_for_slots, pods)), PENDING_POD_WAIT_S):
                return None  # nothing to guess: spare the kubelet a pod-resources List
            pending = [pod for pod in self._pods.pods() if asks_for_slots(pod)]
        try:
            holding = {(ref.namespace, ref.pod) for ref in await self._containers.list_containers()}
        except KubeletError:
            return None
        names: set[str | None] = set()
        for pod in pending:
            if (pod.namespace, pod.name) in holding:
                continue
            names.update(wanted_bitstream(pod, name) for name, count in pod.containers if count > 0)
        if len(names) != 1 or None in names:
            return None
        (name,) = names
        assert name is not None
        try:
            return self._catalog.resolve(name).accelerator_id
        except CatalogError:
            return None if self.declared_accelerator is None else self.declared_accelerator(name)

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
    async def _post(self, pod: PodView | None, reason: str, message: str, type: str = "Normal") -> None:
        if self._events is not None and pod is not None:
            await self._events.post(pod.namespace, pod.name, pod.uid, reason, message, type)
