"""A pulled file that no longer matches its record is taken out of the catalog, so the next start pulls it anew;
a local one stays for its operator."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from agent.errors import BitstreamHashError, UnknownBitstream
from agent.node.reconfigure import Reconfigurer
from agent.programming.catalog import Catalog
from agent.slots.model import Slot
from agent.slots.registry import SlotRegistry
from tests.unit.reconfigure_support import make_slot, reconfigurer

DATA = b"pulled bitstream" * 64
WHO = "pod ns/p container c (slots card0-slot0)"


class NeverCalled:
    async def program(self, slot: Slot, image: bytes, accelerator_id: str, timeout_s: float) -> float:
        raise AssertionError("a file that does not match is never programmed")


def agent_with(catalog: Catalog) -> tuple[Reconfigurer, Slot]:
    registry = SlotRegistry()
    slot = make_slot()
    registry.replace_all([slot])

    async def read_hardware() -> list[Slot]:
        return [slot]

    return reconfigurer(registry, NeverCalled(), read_hardware, catalog), slot


def corrupt(catalog: Catalog, name: str) -> None:
    path = catalog.directory / catalog.resolve(name).file
    data = bytearray(path.read_bytes())
    data[3] ^= 0xFF
    path.write_bytes(bytes(data))


async def test_a_corrupt_pulled_file_is_removed_so_that_it_is_pulled_again(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path)
    with catalog.stage() as staged:
        staged.stream.write(DATA)
        catalog.adopt(staged, "nlb", hashlib.sha256(DATA).hexdigest(), len(DATA), "p", "acc", "oci://reg/nlb:1")
    corrupt(catalog, "nlb")
    agent, slot = agent_with(catalog)
    with pytest.raises(BitstreamHashError, match="removed from the catalog and pulled again"):
        await agent.loader.load(None, WHO, catalog.resolve("nlb"), [slot], time.monotonic() + 5)
    with pytest.raises(UnknownBitstream):
        catalog.resolve("nlb")
    assert os.listdir(tmp_path) == []


async def test_a_corrupt_local_file_stays(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog")
    (tmp_path / "local.bin").write_bytes(DATA)
    catalog.add(tmp_path / "local.bin", "local", platform="p", accelerator_id="acc")
    corrupt(catalog, "local")
    agent, slot = agent_with(catalog)
    with pytest.raises(BitstreamHashError) as info:
        await agent.loader.load(None, WHO, catalog.resolve("local"), [slot], time.monotonic() + 5)
    assert "pulled again" not in str(info.value)
    assert catalog.resolve("local").name == "local"
