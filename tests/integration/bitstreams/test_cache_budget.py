"""The cache under its byte budget with real pulls: least recently used out, files in use kept, full named.

What is in use comes from the budget's ``in_use`` callback, the one the agent wires to its slots and calls."""

from __future__ import annotations

import asyncio
import os

import aiohttp
import pytest

from agent.bitstreams.puller import BitstreamPuller
from agent.errors import CacheFullError
from agent.programming.catalog import Catalog
from tests.integration.bitstreams.conftest import BUDGET_BYTES
from tests.integration.bitstreams.servers import Registry
from tests.integration.bitstreams.test_oci_pull import SIZE, content, push

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")


def names(catalog: Catalog) -> list[str]:
    return [entry.name for entry in catalog.list()]


async def test_the_least_recently_used_pull_is_evicted_for_a_new_one(
    puller: BitstreamPuller, catalog: Catalog, session: aiohttp.ClientSession, registry: Registry, tmp_path
) -> None:
    assert 2 * SIZE < BUDGET_BYTES < 3 * SIZE
    for name in ("a", "b", "c"):
        puller.declare(await push(session, registry, tmp_path, f"lru-{name}", content(name)))
    await puller.ensure("lru-a")
    await puller.ensure("lru-b")
    await puller.ensure("lru-a")  # a used again: b is now the least recently used
    await puller.ensure("lru-c")
    assert names(catalog) == ["lru-a", "lru-c"]
    assert sum(entry.size for entry in catalog.list()) <= BUDGET_BYTES
    assert len(os.listdir(catalog.directory)) == 4


async def test_files_in_use_are_never_evicted_and_a_full_cache_is_named(
    puller: BitstreamPuller,
    catalog: Catalog,
    session: aiohttp.ClientSession,
    registry: Registry,
    tmp_path,
    in_use: set[str],
) -> None:
    for name in ("a", "b", "c"):
        puller.declare(await push(session, registry, tmp_path, f"use-{name}", content(name)))
    await puller.ensure("use-a")
    await puller.ensure("use-b")
    in_use.update({"use-a", "use-b"})  # e.g. loaded in slots that live pods hold
    with pytest.raises(CacheFullError, match="held by bitstreams in use: use-a, use-b"):
        await puller.ensure("use-c")
    assert names(catalog) == ["use-a", "use-b"]
    assert len(os.listdir(catalog.directory)) == 4
    in_use.discard("use-b")
    await puller.ensure("use-c")
    assert names(catalog) == ["use-a", "use-c"]


async def test_local_entries_are_not_the_caches_to_evict(
    puller: BitstreamPuller, catalog: Catalog, session: aiohttp.ClientSession, registry: Registry, tmp_path
) -> None:
    local = tmp_path / "local.bin"
    local.write_bytes(content("local", 3 * SIZE))
    catalog.add(local, "local", platform="p", accelerator_id="a")
    puller.declare(await push(session, registry, tmp_path, "pulled", content("pulled")))
    await puller.ensure("pulled")  # the local file does not count against the budget
    assert names(catalog) == ["local", "pulled"]


async def test_pulls_that_start_together_do_not_plan_on_the_same_free_space(
    puller: BitstreamPuller, catalog: Catalog, session: aiohttp.ClientSession, registry: Registry, tmp_path
) -> None:
    for name in ("a", "b", "c", "d"):
        puller.declare(await push(session, registry, tmp_path, f"race-{name}", content(name)))
    await puller.ensure("race-a")
    await puller.ensure("race-b")
    await asyncio.gather(puller.ensure("race-c"), puller.ensure("race-d"))  # each needs one old file's room
    assert names(catalog) == ["race-c", "race-d"]
    assert sum(entry.size for entry in catalog.list()) <= BUDGET_BYTES


async def test_a_file_taken_into_use_during_an_eviction_is_kept(
    puller: BitstreamPuller,
    catalog: Catalog,
    session: aiohttp.ClientSession,
    registry: Registry,
    tmp_path,
    in_use: set[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Room for a large file means evicting two; while the first goes, a pod start takes up the second. It
    stays, the plan is made again, and with no other room the new file is refused, naming the one in use."""
    for name in ("a", "b"):
        puller.declare(await push(session, registry, tmp_path, f"busy-{name}", content(name)))
    puller.declare(await push(session, registry, tmp_path, "busy-big", content("big", 2 * SIZE)))
    await puller.ensure("busy-a")
    await puller.ensure("busy-b")
    evict = catalog.evict

    def remove_while_a_start_begins(name: str) -> bool:
        if name == "busy-a":
            in_use.add("busy-b")  # a pod's start registers its bitstream while this removal runs
        return evict(name)

    monkeypatch.setattr(catalog, "evict", remove_while_a_start_begins)
    with pytest.raises(CacheFullError, match="held by bitstreams in use: busy-b"):
        await puller.ensure("busy-big")
    assert names(catalog) == ["busy-b"]
