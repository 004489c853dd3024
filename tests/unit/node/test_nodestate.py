"""The node's published state (rendered from registry and catalog, read back through the schema) and the task
that follows changes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Set
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.node.nodestate import CatalogReader, publish_node_state, render_state, slot_platforms
from agent.programming.catalog import Catalog
from agent.slots.model import Health, SlotId
from agent.slots.published import parse_state, published_slot, state_object
from agent.slots.registry import SlotRegistry
from tests.unit.slots.factories import FakeClock, make_slot

TIMEOUT_S = 5.0


def registry_with_every_kind_of_slot() -> SlotRegistry:
    """card0: free empty, held with a known bitstream, unknown accelerator; card1: unhealthy, held and gone."""
    registry = SlotRegistry(clock=FakeClock(1700000000.75))
    registry.replace_all(
        [
            make_slot("card0", "slot0"),
            make_slot("card0", "slot1"),
            make_slot("card0", "slot2", loaded="foreign-accel"),
            make_slot("card1", "slot0", numa=None, health=Health.UNHEALTHY, reason="firmware crashed"),
            make_slot("card1", "slot1", numa=1),
        ]
    )
    registry.assign([["card0-slot1"], ["card1-slot1"]])
    registry.record_content(SlotId("card0-slot1"), "aes", "aes-accel")
    registry.remove(SlotId("card1-slot1"))  # held, so listed until released, unhealthy
    return registry


def test_render_state_is_sorted_and_says_what_each_slot_is() -> None:
    spec = render_state("node-a", reversed(registry_with_every_kind_of_slot().snapshot()), [])
    base = {"card": "card0", "numa": 0, "platform": "test-pr", "bitstream": None, "accelerator": None}
    assert spec["nodeName"] == "node-a"
    assert spec["slots"] == [
        {**base, "id": "card0-slot0", "free": True, "healthy": True, "lastUsed": None},
        {
            **base,
            "id": "card0-slot1",
            "bitstream": "aes",
            "accelerator": "aes-accel",
            "free": False,
            "healthy": True,
            "lastUsed": 1700000000,
        },
        {**base, "id": "card0-slot2", "accelerator": "foreign-accel", "free": True, "healthy": True, "lastUsed": None},
        {**base, "id": "card1-slot0", "card": "card1", "numa": None, "free": True, "healthy": False, "lastUsed": None},
        {
            **base,
            "id": "card1-slot1",
            "card": "card1",
            "numa": 1,
            "free": False,
            "healthy": False,
            "lastUsed": 1700000000,
        },
    ]


def test_render_bitstreams_and_platforms(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog")
    source = tmp_path / "image.bin"
    source.write_bytes(b"bits" * 100)
    catalog.add(source, "zip", platform="pr-b", accelerator_id="z")
    catalog.add(source, "aes", platform="pr-a", accelerator_id="a")
    bitstreams = render_state("n", [], catalog.list())["bitstreams"]
    assert list(bitstreams.items()) == [("aes", "pr-a"), ("zip", "pr-b")]
    assert render_state("n", [], [])["bitstreams"] == {}
    assert slot_platforms(registry_with_every_kind_of_slot().snapshot()) == {"test-pr"}


def test_what_is_rendered_reads_back_unchanged() -> None:
    states = registry_with_every_kind_of_slot().snapshot()
    spec = render_state("node-a", states, [])
    assert parse_state(state_object("node-a", "fpga-slot", spec)).slots == tuple(published_slot(s) for s in states)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=6),
    max_leaves=20,
)
SLOT_KEYS = ("id", "card", "numa", "platform", "bitstream", "accelerator", "free", "healthy", "lastUsed")
SLOT_LIKE = st.lists(st.fixed_dictionaries({}, optional=dict.fromkeys(SLOT_KEYS, JSON_VALUES)), max_size=3)


@given(st.one_of(JSON_VALUES, SLOT_LIKE), JSON_VALUES)
def test_reading_never_fails_with_anything_but_value_error(slots: Any, bitstreams: Any) -> None:
    with contextlib.suppress(ValueError):
        parse_state({"metadata": {"name": "n"}, "spec": {"nodeName": "n", "slots": slots, "bitstreams": bitstreams}})


# --------------------------------------------------------------------- following changes
class Recorder:
    """A StatePublisher that keeps every update and wakes waiters."""

    def __init__(self) -> None:
        self.updates: list[tuple[list[Any], dict[str, str], set[str]]] = []
        self._changed = asyncio.Event()

    def update(self, spec: Mapping[str, Any], platforms: Set[str]) -> None:
        self.updates.append((list(spec["slots"]), dict(spec["bitstreams"]), set(platforms)))
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(TIMEOUT_S):
            while not predicate():
                await self._changed.wait()

    @property
    def last(self) -> tuple[list[Any], dict[str, str], set[str]]:
        return self.updates[-1]


@contextlib.asynccontextmanager
async def following(registry: SlotRegistry, catalog: Catalog | None, rescan_s: float = 60.0) -> AsyncIterator[Recorder]:
    recorder = Recorder()
    task = asyncio.create_task(
        publish_node_state("node-a", registry, catalog, recorder, rescan_s=rescan_s), name="node-state"
    )
    try:
        yield recorder
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_follows_the_registry(no_leaked_tasks: None) -> None:
    registry = SlotRegistry()
    registry.replace_all([make_slot("card0", "slot0"), make_slot("card0", "slot1")])
    async with following(registry, None) as recorder:
        await recorder.wait_for(lambda: bool(recorder.updates))
        slots, bitstreams, platforms = recorder.last
        assert [s["free"] for s in slots] == [True, True]
        assert (bitstreams, platforms) == ({}, {"test-pr"})

        registry.assign([["card0-slot1"]])
        await recorder.wait_for(lambda: not recorder.last[0][1]["free"])
        registry.record_content(SlotId("card0-slot1"), "aes", "aes-accel")
        await recorder.wait_for(lambda: recorder.last[0][1]["bitstream"] == "aes")
        registry.release([SlotId("card0-slot1")])
        await recorder.wait_for(lambda: recorder.last[0][1]["free"])
        assert recorder.last[0][1]["bitstream"] == "aes"  # released, still loaded: the cache the extender scores

        registry.replace_all([])  # the card is gone
        await recorder.wait_for(lambda: recorder.last[0] == [])
        assert recorder.last[2] == set()


async def test_catalog_changes_are_picked_up_and_bad_records_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, no_leaked_tasks: None
) -> None:
    registry = SlotRegistry()
    registry.replace_all([make_slot()])
    catalog = Catalog(tmp_path / "catalog")
    source = tmp_path / "image.bin"
    source.write_bytes(b"bits" * 100)
    catalog.add(source, "aes", platform="test-pr", accelerator_id="a")
    async with following(registry, catalog, rescan_s=0.01) as recorder:
        await recorder.wait_for(lambda: bool(recorder.updates) and recorder.last[1] == {"aes": "test-pr"})
        catalog.add(source, "zip", platform="test-pr", accelerator_id="z")
        (catalog.directory / "broken.json").write_text("{")
        await recorder.wait_for(lambda: recorder.last[1] == {"aes": "test-pr", "zip": "test-pr"})
        seen = len(recorder.updates)
        await recorder.wait_for(lambda: len(recorder.updates) >= seen + 3)  # three more reads of the catalog
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([w for w in warnings if "broken.json" in w]) == 1


async def test_a_bitstream_added_by_another_process_is_published_without_waiting_for_the_rescan(
    tmp_path: Path, no_leaked_tasks: None
) -> None:
    """`catalog add` renames files into the directory: the inotify watch wakes the publisher (rescan an hour away)."""
    registry = SlotRegistry()
    registry.replace_all([make_slot()])
    catalog = Catalog(tmp_path / "catalog")  # not there yet: created and watched from the start
    source = tmp_path / "image.bin"
    source.write_bytes(b"bits" * 100)
    async with following(registry, catalog, rescan_s=3600.0) as recorder:
        await recorder.wait_for(lambda: bool(recorder.updates))
        assert recorder.last[1] == {}
        Catalog(tmp_path / "catalog").add(source, "aes", platform="test-pr", accelerator_id="a")
        await recorder.wait_for(lambda: recorder.last[1] == {"aes": "test-pr"})


async def test_an_unreadable_catalog_keeps_the_last_good_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, no_leaked_tasks: None
) -> None:
    registry = SlotRegistry()
    registry.replace_all([make_slot()])
    directory = tmp_path / "catalog"
    catalog = Catalog(directory)
    source = tmp_path / "image.bin"
    source.write_bytes(b"bits" * 100)
    catalog.add(source, "aes", platform="test-pr", accelerator_id="a")
    async with following(registry, catalog, rescan_s=0.01) as recorder:
        await recorder.wait_for(lambda: bool(recorder.updates) and recorder.last[1] == {"aes": "test-pr"})
        renamed = tmp_path / "moved"
        directory.rename(renamed)
        directory.write_text("not a directory")  # listing it fails (ENOTDIR)
        seen = len(recorder.updates)
        await recorder.wait_for(lambda: len(recorder.updates) >= seen + 3)
        assert recorder.last[1] == {"aes": "test-pr"}
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([w for w in warnings if "cannot be read" in w]) == 1


async def test_catalog_is_scanned_again_only_when_it_changed_or_when_forced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = Catalog(tmp_path / "catalog")
    source = tmp_path / "a.bin"
    source.write_bytes(b"image a")
    catalog.add(source, "accel-a", platform="p", accelerator_id="acc-a")
    scans: list[int] = []
    real_scan = catalog.scan

    def counting_scan() -> Any:
        scans.append(1)
        return real_scan()

    monkeypatch.setattr(catalog, "scan", counting_scan)
    reader = CatalogReader(catalog)

    assert [e.name for e in await reader.read()] == ["accel-a"]
    assert [e.name for e in await reader.read()] == ["accel-a"]
    assert len(scans) == 1  # unchanged directory: the last read stands

    source.write_bytes(b"image b")
    catalog.add(source, "accel-b", platform="p", accelerator_id="acc-b")
    assert [e.name for e in await reader.read()] == ["accel-a", "accel-b"]
    assert len(scans) == 2

    await reader.read(force=True)
    assert len(scans) == 3
