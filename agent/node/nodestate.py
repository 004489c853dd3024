"""The node's slot state as the scheduler extender and the cluster view read it from the Node.

Wiring between the slot registry, the bitstream catalog and the API server (so it
may import all three): :func:`publish_node_state` follows the registry's changes,
renders the annotations and hands them to the :class:`~agent.kube.NodePublisher`,
which decides when to patch. The wire format lives here in both directions:

* ``example.com/fpga-slots``: compact JSON list sorted by slot id, one object per slot
  (:class:`PublishedSlot`): ``id``, ``card``, ``numa`` (int or null), ``platform``,
  ``bitstream`` (catalog name loaded, or null when empty or unknown), ``accelerator``
  (accelerator id loaded, or null), ``free`` (no holder), ``healthy``, ``last_used``
  (epoch seconds, or null);
* ``example.com/fpga-bitstreams``: compact JSON object, sorted, catalog name -> platform;
* the platforms (for the labels) are those of the listed slots.

Parsing (:func:`parse_slots`, :func:`parse_bitstreams`) is for readers: it raises
ValueError naming what is wrong, ignores fields it does not know (a newer agent may
add some) and accepts the fields the first design listed (no ``accelerator`` or
``last_used``).

The catalog is written by another process (``fpga-agent catalog add``), which renames
its files into the catalog directory: an inotify watch on that directory makes a new
or removed bitstream visible to the scheduler at once. The catalog is also read on
every registry change and every ``CATALOG_RESCAN_S`` (records edited in place, or a
directory that could not be watched); reading it costs a directory listing and its
small records.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping, Set
from pathlib import Path
from typing import Any, Protocol, TypedDict

from agent.errors import CatalogError
from agent.files.dirwatch import DirWatcher
from agent.programming.catalog import Catalog, CatalogEntry
from agent.slots import Health, SlotRegistry, SlotState

logger = logging.getLogger(__name__)

#: How often the catalog is read again when the slots do not change.
CATALOG_RESCAN_S = 30.0
#: Least time between two renders of the node state (the publisher patches at most about twice a second).
RENDER_INTERVAL_S = 0.5
_COMPACT = (",", ":")


class PublishedSlot(TypedDict):
    """One slot in the ``example.com/fpga-slots`` annotation."""

    id: str
    card: str
    numa: int | None
    platform: str
    bitstream: str | None
    accelerator: str | None
    free: bool
    healthy: bool
    last_used: int | None


class StatePublisher(Protocol):
    """Where the rendered state goes (:class:`agent.kube.NodePublisher`, or a test's recorder)."""

    def update(self, slots_json: str, bitstreams_json: str, platforms: Set[str]) -> None: ...


# ------------------------------------------------------------------------- rendering
def published_slot(state: SlotState) -> PublishedSlot:
    slot = state.slot
    return {
        "id": str(slot.id),
        "card": slot.card,
        "numa": slot.numa,
        "platform": slot.platform,
        "bitstream": state.bitstream,
        "accelerator": state.accelerator_id,
        "free": state.holder is None,
        "healthy": state.health is Health.HEALTHY,
        "last_used": int(state.last_used) if state.last_used is not None else None,
    }


def render_slots(states: Iterable[SlotState]) -> str:
    """The ``example.com/fpga-slots`` annotation: compact JSON, sorted by slot id."""
    records = sorted((published_slot(state) for state in states), key=lambda record: record["id"])
    return json.dumps(records, separators=_COMPACT)


def render_bitstreams(entries: Iterable[CatalogEntry]) -> str:
    """The ``example.com/fpga-bitstreams`` annotation: compact JSON object name -> platform, sorted."""
    return json.dumps({entry.name: entry.platform for entry in entries}, separators=_COMPACT, sort_keys=True)


def slot_platforms(states: Iterable[SlotState]) -> set[str]:
    """The platforms of the listed slots (a slot without one contributes none)."""
    return {state.slot.platform for state in states if state.slot.platform}


def _mtime_ns(directory: Path) -> int | None:
    try:
        return directory.stat().st_mtime_ns
    except OSError:
        return None


class CatalogReader:
    """Reads the catalog in a worker thread; says each unusable record once; keeps the last good read.

    ``catalog add`` puts files in by rename, which changes the directory's mtime: while
    that stays the same the last read is reused, unless ``force`` (the periodic rescan,
    for records edited in place).
    """

    def __init__(self, catalog: Catalog | None) -> None:
        self._catalog = catalog
        self._entries: list[CatalogEntry] = []
        self._reported: set[str] = set()
        self._read_at_mtime: int | None = None
        #: whether a read has succeeded (a reader that has read is what the agent's start hands on)
        self.has_read = False

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
        self.has_read = True
        for problem in scan.problems:
            self._report(f"skipping {problem.record}: {problem.reason}")
        self._entries = scan.entries
        return self._entries

    def _report(self, text: str) -> None:
        if text not in self._reported:
            self._reported.add(text)
            logger.warning("bitstream catalog (published on the node): %s", text)


async def publish_node_state(
    registry: SlotRegistry,
    catalog: Catalog | None,
    publisher: StatePublisher,
    *,
    rescan_s: float = CATALOG_RESCAN_S,
    interval_s: float = RENDER_INTERVAL_S,
    reader: CatalogReader | None = None,
) -> None:
    """Hand the current state to ``publisher`` now and after registry changes, until cancelled.

    At most one update per ``interval_s`` (the publisher patches no faster): a burst of
    changes, such as a node's pods starting together, costs one render, and the device
    plugin's RPCs do not wait behind renders. ``reader``: the agent's reader of ``catalog``,
    when it has read the catalog already (its read is used, not repeated, while the
    directory is unchanged).
    """
    reader = reader or CatalogReader(catalog)
    catalog_changed = asyncio.Event()
    watcher = _watch_catalog(catalog, catalog_changed)
    rescan = not reader.has_read
    try:
        while True:
            catalog_changed.clear()
            entries = await reader.read(force=rescan)
            version = registry.version
            states = registry.snapshot()  # immutable values: rendered in a thread, off the RPCs' loop
            slots_json = await asyncio.to_thread(render_slots, states)
            publisher.update(slots_json, render_bitstreams(entries), slot_platforms(states))
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


# --------------------------------------------------------------------------- parsing
def parse_slots(text: str) -> list[PublishedSlot]:
    """The slots of an ``example.com/fpga-slots`` annotation; ValueError naming what is wrong."""
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, list):
        raise ValueError(f"not a JSON list but {_json_type(data)}")
    return [_parse_slot(item, index) for index, item in enumerate(data)]


def parse_bitstreams(text: str) -> dict[str, str]:
    """The catalog of an ``example.com/fpga-bitstreams`` annotation; ValueError naming what is wrong."""
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object but {_json_type(data)}")
    for name, platform in data.items():
        if not isinstance(platform, str):
            raise ValueError(f"bitstream {name!r}: platform is {_json_type(platform)}, not a string")
    return dict(data)


def _parse_slot(item: object, index: int) -> PublishedSlot:
    if not isinstance(item, Mapping):
        raise ValueError(f"slot {index}: {_json_type(item)}, not an object")
    where = f"slot {item.get('id', index)!r}" if isinstance(item.get("id"), str) else f"slot {index}"
    return {
        "id": _field(item, "id", str, where, required=True) or "",
        "card": _field(item, "card", str, where, required=True) or "",
        "numa": _field(item, "numa", int, where),
        "platform": _field(item, "platform", str, where, required=True) or "",
        "bitstream": _field(item, "bitstream", str, where),
        "accelerator": _field(item, "accelerator", str, where),
        "free": bool(_field(item, "free", bool, where, required=True)),
        "healthy": bool(_field(item, "healthy", bool, where, required=True)),
        "last_used": _field(item, "last_used", int, where),
    }


def _field(item: Mapping[str, Any], key: str, kind: type, where: str, *, required: bool = False) -> Any:
    if key not in item:
        if required:
            raise ValueError(f"{where}: no {key!r}")
        return None
    value = item[key]
    if value is None and not required:
        return None
    # JSON true/false are bools, and bool is an int in Python: keep them apart.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{where}: {key!r} is {_json_type(value)}, not {_TYPE_NAMES[kind]}")
    return value


_TYPE_NAMES: dict[type, str] = {str: "a string", int: "an integer", bool: "true or false"}


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"
