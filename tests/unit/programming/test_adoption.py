"""Pulled files entering the catalog: renamed in with their record, checked against a GBS header, removable."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from agent.errors import BitstreamFileError, CatalogError, PlatformMismatch
from agent.files.atomic import TEMP_PREFIX as ADD_PREFIX
from agent.files.atomic import StagedFile
from agent.programming.catalog import PULL_TEMP_PREFIX, Catalog
from tests.unit.programming.gbs_files import ACCELERATOR_ID, INTERFACE_ID, build_gbs

RAW = b"raw-bitstream" * 100
SOURCE = "oci://localhost:5000/nlb:1"


@pytest.fixture
def pulled(tmp_path: Path) -> Catalog:
    store = Catalog(tmp_path / "catalog")
    store.prepare({})
    return store


def adopt(store: Catalog, data: bytes, name: str = "nlb", platform: str = "p", accelerator: str = "a") -> None:
    """Stage ``data`` and adopt it as a pull does: the staged file goes whatever happens."""
    with store.stage() as staged:
        staged.stream.write(data)
        store.adopt(staged, name, hashlib.sha256(data).hexdigest(), len(data), platform, accelerator, SOURCE)


def test_a_raw_file_becomes_a_catalog_entry_with_its_source(pulled: Catalog) -> None:
    adopt(pulled, RAW)
    entry = pulled.resolve("nlb")
    assert entry.source == SOURCE
    assert entry.file == f"nlb.{hashlib.sha256(RAW).hexdigest()[:12]}.bin"
    assert pulled.read_image(entry) == RAW
    assert sorted(os.listdir(pulled.directory)) == sorted([entry.file, "nlb.json"])


def test_a_gbs_file_must_match_the_declaration(pulled: Catalog) -> None:
    gbs = build_gbs()
    adopt(pulled, gbs, platform=INTERFACE_ID, accelerator=ACCELERATOR_ID)
    assert pulled.resolve("nlb").file.endswith(".gbs")
    with pytest.raises(PlatformMismatch, match=f"declared platform {'0' * 32} differs from the GBS header's"):
        adopt(pulled, gbs, name="other", platform="0" * 32, accelerator=ACCELERATOR_ID)
    with pytest.raises(PlatformMismatch, match="declared accelerator id"):
        adopt(pulled, gbs, name="other", platform=INTERFACE_ID, accelerator="x")
    assert pulled.find("other") is None
    assert len(os.listdir(pulled.directory)) == 2


def test_a_new_pull_replaces_the_old_one(pulled: Catalog) -> None:
    adopt(pulled, RAW)
    adopt(pulled, RAW + b"v2")
    assert pulled.read_image(pulled.resolve("nlb")) == RAW + b"v2"
    assert len(os.listdir(pulled.directory)) == 2


def test_a_local_entry_is_neither_replaced_nor_removed(pulled: Catalog, tmp_path: Path) -> None:
    (tmp_path / "local.bin").write_bytes(RAW)
    pulled.add(tmp_path / "local.bin", "nlb", platform="p", accelerator_id="a")
    with pytest.raises(CatalogError, match="is a local catalog entry"):
        adopt(pulled, RAW + b"x")
    assert pulled.evict("nlb") is False
    assert pulled.read_image(pulled.resolve("nlb")) == RAW
    assert len(os.listdir(pulled.directory)) == 2


def test_evict_takes_record_and_file(pulled: Catalog) -> None:
    adopt(pulled, RAW)
    assert pulled.evict("nlb") is True
    assert os.listdir(pulled.directory) == []
    assert pulled.evict("nlb") is False


def test_a_file_outside_the_catalog_is_refused(pulled: Catalog, tmp_path: Path) -> None:
    with StagedFile(tmp_path) as outside:
        outside.stream.write(RAW)
        with pytest.raises(BitstreamFileError, match="is not in the catalog"):
            pulled.adopt(outside, "nlb", "0" * 64, len(RAW), "p", "a", SOURCE)
    assert os.listdir(tmp_path) == ["catalog"]
    assert os.listdir(pulled.directory) == []


def test_a_pulled_file_is_staged_under_the_pulls_prefix_and_left_nowhere(pulled: Catalog) -> None:
    with pulled.stage() as staged:
        (name,) = os.listdir(pulled.directory)
        assert name.startswith(PULL_TEMP_PREFIX)
        staged.stream.write(RAW)
    assert os.listdir(pulled.directory) == []


def test_prepare_removes_what_a_crashed_pull_left(pulled: Catalog) -> None:
    (pulled.directory / f"{PULL_TEMP_PREFIX}test").write_bytes(RAW)
    (pulled.directory / ".tmp-abc").write_bytes(b"x")  # a catalog add's temp file: not the pulls' to remove
    pulled.prepare({})
    assert os.listdir(pulled.directory) == [".tmp-abc"]


def test_start_removes_a_crashed_pulls_temp_file_but_not_a_catalog_add_in_progress(tmp_path: Path) -> None:
    store = Catalog(tmp_path)
    leftover = tmp_path / f"{PULL_TEMP_PREFIX}abc"
    in_progress = tmp_path / f"{ADD_PREFIX}xyz"
    leftover.write_bytes(b"half a pull")
    in_progress.write_bytes(b"catalog add copying")
    store.prepare({})
    assert not leftover.exists()
    assert in_progress.read_bytes() == b"catalog add copying"


def aged(path: Path, seconds: float = 3600.0) -> None:
    """As if the file had been written ``seconds`` ago."""
    then = path.stat().st_mtime - seconds
    os.utime(path, (then, then))


def test_prepare_removes_files_a_crash_left_without_a_record(pulled: Catalog, tmp_path: Path) -> None:
    """A replace killed before the old file went, a removal killed after the record went, and an install
    killed before its record: none of those files is named by a record, so no budget would ever count or
    evict them. Files an install is writing right now, files of a record that does not parse, and files
    not named as the catalog names them stay."""
    adopt(pulled, RAW)
    old = pulled.directory / pulled.resolve("nlb").file
    kept_bytes = old.read_bytes()
    adopt(pulled, RAW + b"v2")  # replaces the old file: put it back, as a crash before its unlink leaves it
    old.write_bytes(kept_bytes)
    aged(old)
    adopt(pulled, RAW + b"evicted", name="gone")
    gone = pulled.directory / pulled.resolve("gone").file
    (pulled.directory / "gone.json").unlink()  # killed between the record and the file
    aged(gone)
    fresh = pulled.directory / f"new.{'a' * 12}.bin"  # an install writing its record right now
    fresh.write_bytes(RAW)
    (tmp_path / "local.bin").write_bytes(RAW)
    pulled.add(tmp_path / "local.bin", "local", platform="p", accelerator_id="a")
    local = pulled.directory / pulled.resolve("local").file
    (pulled.directory / "local.json").write_text("{ broken by hand")  # its file stays for the operator
    aged(local)
    notes = pulled.directory / "notes.txt"
    notes.write_text("not a catalog file")
    aged(notes)
    current = pulled.directory / pulled.resolve("nlb").file

    pulled.prepare({entry.name: entry.file for entry in pulled.list()})

    assert not old.exists()
    assert not gone.exists()
    assert {p.name for p in pulled.directory.iterdir()} == {
        current.name,
        "nlb.json",
        fresh.name,
        local.name,
        "local.json",
        notes.name,
    }
    assert pulled.read_image(pulled.resolve("nlb")) == RAW + b"v2"
