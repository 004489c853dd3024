"""This node's slot state for the scheduler extender and the cluster view: rendered here, published by ``agent.kube``
as the registry and the catalog change."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Set
from pathlib import Path
from typing import Any, Protocol

from agent.errors import CatalogError
from agent.files.dirwatch import DirWatcher
from agent.programming.catalog import Catalog
from agent.programming.catalogentry import CatalogEntry
from agent.slots.published import dropped, state_spec
from agent.slots.registry import SlotRegistry, SlotState

logger = logging.getLogger(__name__)

#: How often the catalog is read again when the slots do not change.
CATALOG_RESCAN_S = 30.0
#: Least time between two renders of the node state (the publisher writes at most about twice a second).
RENDER_INTERVAL_S = 0.5


class StatePublisher(Protocol):
    """Where the rendered state goes (:class:`agent.kube.nodes.NodePublisher`, or a test's recorder)."""

    def update(self, spec: Mapping[str, Any], platforms: Set[str]) -> None: ...


def render_state(node: str, states: Iterable[SlotState], entries: Iterable[CatalogEntry]) -> dict[str, Any]:
    """The FpgaNodeState spec of these slots and catalog entries."""
    return state_spec(node, states, {entry.name: entry.platform for entry in entries})


def slot_platforms(states: Iterable[SlotState]) -> set[str]:
    """The platforms of the listed slots (a slot without one contributes none)."""
    return {state.slot.platform for state in states if state.slot.platform}


def _mtime_ns(directory: Path) -> int | None:
    try:
        return directory.stat().st_mtime_ns
    except OSError:
        return None


class CatalogReader:
    """Reads the catalog in a worker thread (again only when its directory's mtime changed, or ``force``); says each
    unusable record once; keeps the last good read."""

    def __init__(self, catalog: Catalog | None) -> None:
        self._catalog = catalog
        self._entries: list[CatalogEntry] = []
        self._reported: set[str] = set()
        self._read_at_mtime: int | None = None

    async def read(self, force: bool = False) -> list[CatalogEntry]:
        if self._catalog is None:
            return []
        catalog = self._catalog
        mtime = await asyncio.to_thread(_mtime_ns, catalog.directory)
        if not force and mtime is not None and mtime == self._read_at_mtime:
            return self._entries
        try:
            scan = await asyncio.to_thread(catalog.scan)
        except CatalogError as exc:
            self._read_at_mtime = None
            self._report(f"the catalog cannot be read: {exc}; publishing the bitstreams read before")
            return self._entries
        self._read_at_mtime = mtime
        for problem in scan.problems:
            self._report(f"skipping {problem.record}: {problem.reason}")
        self._entries = scan.entries
        return self._entries

    def _report(self, text: str) -> None:
        if text not in self._reported:
            self._reported.add(text)
            logger.warning("bitstream catalog (published on the node): %s", text)


async def publish_node_state(
    node: str,
    registry: SlotRegistry,
    catalog: Catalog | None,
    publisher: StatePublisher,
    *,
    rescan_s: float = CATALOG_RESCAN_S,
    interval_s: float = RENDER_INTERVAL_S,
    reader: CatalogReader | None = None,
) -> None:
    """Hand the current state to ``publisher`` now and after registry or catalog changes, at most once per
    ``interval_s``, until cancelled. ``reader``: a reader of ``catalog`` that may have read it already."""
    reader = reader or CatalogReader(catalog)
    catalog_changed = asyncio.Event()
    watcher = _watch_catalog(catalog, catalog_changed)
    rescan = False  # a reader that never read the catalog (or failed to) reads it anyway
    reported: set[str] = set()
    try:
        while True:
            catalog_changed.clear()
            entries = await reader.read(force=rescan)
            version = registry.version
            states = registry.snapshot()  # immutable values: rendered in a thread, off the RPCs' loop
            spec = await asyncio.to_thread(render_state, node, states, entries)
            _report_dropped(reported, len(states), len(entries))
            publisher.update(spec, slot_platforms(states))
            await asyncio.sleep(interval_s)
            rescan = not await _wait_for_change(registry, version, catalog_changed, rescan_s)
    finally:
        if watcher is not None:
            watcher.stop()


def _watch_catalog(catalog: Catalog | None, changed: asyncio.Event) -> DirWatcher | None:
    """An inotify watch that sets ``changed`` when a file enters or leaves the catalog; None if impossible."""
    if catalog is None:
        return None
    watcher = DirWatcher(catalog.directory, lambda _event, _name: changed.set())
    try:
        catalog.directory.mkdir(parents=True, exist_ok=True)  # as `catalog add` would: watch it from the start
        watcher.start()
    except OSError as exc:
        logger.warning(
            "cannot watch the bitstream catalog %s (%s): new bitstreams are published within %.0f s",
            catalog.directory,
            exc,
            CATALOG_RESCAN_S,
        )
        return None
    return watcher


async def _wait_for_change(
    registry: SlotRegistry, version: int, catalog_changed: asyncio.Event, timeout_s: float
) -> bool:
    """Until the slots or the catalog change (True), or ``timeout_s`` passes (False)."""
    waits = [
        asyncio.ensure_future(registry.wait_for_change(version)),
        asyncio.ensure_future(catalog_changed.wait()),
    ]
    try:
        done, _ = await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
    return bool(done)


def _report_dropped(reported: set[str], slots: int, bitstreams: int) -> None:
    """Say once what the published state leaves out past its bounds."""
    extra_slots, extra_bitstreams = dropped(slots, bitstreams)
    for count, what in ((extra_slots, "slots"), (extra_bitstreams, "bitstreams")):
        if count and what not in reported:
            reported.add(what)
            logger.warning("the published slot state leaves out %d %s (past its bound)", count, what)
