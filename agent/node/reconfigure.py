"""Reconfiguration: find the pod, check the bitstream it asked for against every slot, then hand it to
:class:`~agent.node.slotloader.SlotLoader`; releasing slots whose holders are gone; guessing the accelerator of
the pod being admitted (GetPreferredAllocation)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping

from agent.errors import (
    CatalogError,
    KubeletError,
    PlatformMismatch,
    PodLookupError,
    shown,
)
from agent.files.bitstream import CARD_SCOPE, SLOT_SCOPE
from agent.node.metrics import AgentMetrics
from agent.node.pods import ContainerFinder, ContainerRefLike, EventSink, PodDirectory, PodView
from agent.node.slotloader import HardwareReader, SlotLoader
from agent.programming.base import Programmer
from agent.programming.catalog import Catalog
from agent.programming.catalogentry import CatalogEntry, check_platform, check_scope
from agent.slots.bitstreamrequest import BITSTREAM_ANNOTATION, container_bitstream
from agent.slots.model import Slot, SlotId
from agent.slots.registry import SlotRegistry

logger = logging.getLogger(__name__)

ANNOTATION = BITSTREAM_ANNOTATION
#: How long PreStartContainer waits for the pod watch to deliver a pod it does not know yet.
POD_WAIT_S = 2.0
#: How long GetPreferredAllocation waits for the watch to deliver the pod being admitted.
PENDING_POD_WAIT_S = 0.5
#: How often holders are checked against pod-resources (besides pod deletion events).
RECONCILE_INTERVAL_S = 30.0
#: A holder allocated this recently may not show in pod-resources yet: keep it.
RECONCILE_GRACE_S = 10.0


#: Makes a bitstream the cluster declares present in the catalog before it is resolved:
#: ``(pod, name, platform of the slots or None, deadline)``; raises CatalogError (nothing is changed then).
BitstreamFetcher = Callable[[PodView | None, str, str | None, float], Awaitable[None]]


def wanted_bitstream(pod: PodView, container: str) -> str | None:
    """The bitstream name a container asks for: its own annotation, else the pod's (as the webhook reads it)."""
    asked = container_bitstream(pod.annotations, container)
    return None if asked is None else str(asked[1])


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
        """``before_programming`` runs after a slot is marked as being programmed and before the hardware is
        touched (the agent writes its checkpoint there)."""
        #: Pulls a declared bitstream that is not in the catalog yet; without it only the local catalog counts.
        self.fetch_bitstream: BitstreamFetcher | None = None
        #: The accelerator id the cluster declares for a bitstream name (None: not declared).
        self.declared_accelerator: Callable[[str], str | None] | None = None
        self._loading: Counter[str] = Counter()
        self._registry = registry
        self._containers = containers
        self._pods = pods
        self._catalog = catalog
        #: What programs the slots once a request is checked.
        self.loader = SlotLoader(
            registry,
            catalog=catalog,
            programmers=programmers,
            read_hardware=read_hardware,
            events=events,
            timeout_s=timeout_s,
            metrics=metrics,
            before_programming=before_programming,
        )
        self._timeout_s = timeout_s
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
        self,
        pod: PodView | None,
        wanted: Mapping[str, list[SlotId]],
        who: str,
        deadline: float,
        scope: str = SLOT_SCOPE,
    ) -> None:
        """Put each bitstream into its slots not holding it yet (with ``CARD_SCOPE``: into their whole card) by
        ``deadline``. All are checked before any slot is touched; errors name ``who``, Events go to ``pod``."""
        with self._wanting(wanted):
            await self._fetch(pod, wanted, who, deadline)
            try:
                checked = [self._check(name, slot_ids, who, scope) for name, slot_ids in wanted.items()]
            except CatalogError as exc:
                await self.loader.post(pod, "FpgaBitstreamRejected", str(exc), "Warning")
                raise
            for entry, slots in checked:
                await self.loader.load(pod, who, entry, slots, deadline, scope == CARD_SCOPE)

    async def load_card(
        self, pod: PodView | None, name: str, slot_ids: list[SlotId], who: str, deadline: float
    ) -> None:
        """Put the whole-card image ``name`` into the card of ``slot_ids`` (every slot of it), by ``deadline``."""
        await self.load_many(pod, {name: slot_ids}, who, deadline, CARD_SCOPE)

    @contextlib.contextmanager
    def _wanting(self, names: Iterable[str]) -> Iterator[None]:
        names = list(names)
        self._loading.update(names)
        try:
            yield
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

    async def _find(self, device_ids: list[str]) -> ContainerRefLike | None:
        """The container holding the slots; None only when pods cannot be read anyway."""
        slots = ",".join(device_ids)
        try:
            ref = await self._containers.find_container(device_ids)
        except KubeletError as exc:
            if self._pods is None:
                logger.warning("slots %s: holder unknown (%s)", slots, exc)
                return None
            raise PodLookupError(f"slots {slots}: cannot ask the kubelet which pod holds them: {exc}") from exc
        if ref is None:
            if self._pods is None:
                logger.warning("slots %s: no container holds them in pod-resources yet", slots)
                return None
            raise PodLookupError(f"slots {slots}: no pod holds them in the kubelet's pod-resources")
        return ref

    def _check(self, name: str, slot_ids: list[SlotId], who: str, scope: str) -> tuple[CatalogEntry, list[Slot]]:
        """Resolve the bitstream and check it is an image for ``scope`` that fits every slot."""
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
                check_scope(entry, scope, f"card {state.slot.card}" if scope == CARD_SCOPE else f"slot {slot_id}")
                check_platform(entry, state.slot)
            except PlatformMismatch as exc:
                raise PlatformMismatch(f"{who}: {exc}") from exc
            if scope == SLOT_SCOPE and not self.loader.can_program(state.slot):
                raise CatalogError(f"{who}: slot {slot_id} ({state.slot.backend}) cannot be programmed by this agent")
            slots.append(state.slot)
        if scope == CARD_SCOPE and not self.loader.can_program_card(slots):
            raise CatalogError(f"{who}: card {slots[0].card} cannot be programmed whole by this agent")
        return entry, slots

    # ----------------------------------------------------------------- release
    async def reconcile(self) -> None:
        """Release slots no container holds in pod-resources (their bitstream stays loaded); learn holders the
        kubelet reports. Device-plugin mode only."""
        refs = await self._containers.list_containers()
        held: set[str] = set()
        for ref in refs:
            held |= ref.device_ids
            states = [s for s in map(self._registry.get, map(SlotId, ref.device_ids)) if s is not None]
            if any(s.holder is None or (s.holder.namespace, s.holder.pod) != (ref.namespace, ref.pod) for s in states):
                self._registry.set_holder([s.slot.id for s in states], ref.namespace, ref.pod, ref.container)
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
        """The accelerator of the pod being admitted: None unless every pending pod asking for slots (and holding
        none yet) asks for the same bitstream."""
        if self._pods is None or self._catalog is None:
            return None

        def asks_for_slots(pod: PodView) -> bool:
            return pod.phase == "Pending" and any(n > 0 for _, n in pod.containers)

        pending = [pod for pod in self._pods.pods() if asks_for_slots(pod)]
        if not pending:
            # The kubelet asks only while admitting such a pod: the watch has not delivered it yet.
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
