"""The bitstream catalog: names, add/list/resolve, GBS headers, integrity, bad records, atomic adds."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import logging
import os
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from agent.errors import (
    BitstreamFileError,
    BitstreamHashError,
    CatalogError,
    InvalidBitstreamName,
    PlatformMismatch,
    UnknownBitstream,
)
from agent.files.bitstream import validate_name
from agent.programming import catalog as catalog_module
from agent.programming.catalog import Catalog
from agent.programming.catalogentry import CatalogEntry, check_platform
from agent.slots.model import Health, Slot, make_slot_id
from tests.unit.programming.gbs_files import (
    ACCELERATOR_ID,
    INTERFACE_ID,
    INTERFACE_UUID,
    PAYLOAD,
    build_gbs,
    gbs_metadata,
)

RAW = b"\x00\x09raw-bitstream" * 50
PLATFORM_UUID = "9a3d7c8e-1111-4f0a-8d1b-0123456789ab"
PLATFORM_ID = "9a3d7c8e11114f0a8d1b0123456789ab"
RECORD_KEYS = {"name", "file", "size", "sha256", "platform", "accelerator_id", "added_at"}


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return Catalog(tmp_path / "bitstreams")


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    path = tmp_path / "sources"
    path.mkdir()
    return path


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def listing(directory: Path) -> list[str]:
    """Every name in the directory, dot files included (temp files must not survive)."""
    return sorted(os.listdir(directory)) if directory.exists() else []


def add_raw(catalog: Catalog, sources: Path, name: str = "aes-v1", data: bytes = RAW) -> CatalogEntry:
    source = write(sources / f"{name}.bit", data)
    return catalog.add(source, name, platform=PLATFORM_UUID, accelerator_id="aes")


def slot_with_platform(platform: str, card: str = "0000:3b:00.0", region: str = "port0") -> Slot:
    return Slot(
        id=make_slot_id(card, region),
        card=card,
        region=region,
        numa=0,
        device_nodes=(),
        platform=platform,
        loaded=None,
        health=Health.HEALTHY,
        backend="dfl",
        control_node="/dev/dfl-fme.0",
    )


# ---------------------------------------------------------------------- names
@pytest.mark.parametrize(
    "name",
    [
        pytest.param("a", id="one-letter"),
        pytest.param("0", id="one-digit"),
        pytest.param("aes-v1", id="dash"),
        pytest.param("nlb_400.v2-rc1", id="dot-underscore-dash"),
        pytest.param("x" * 63, id="63-chars"),
    ],
)
def test_valid_names(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("", id="empty"),
        pytest.param("AES", id="upper-case"),
        pytest.param("-aes", id="leading-dash"),
        pytest.param(".hidden", id="leading-dot"),
        pytest.param("_x", id="leading-underscore"),
        pytest.param("..", id="dot-dot"),
        pytest.param("../etc/passwd", id="traversal"),
        pytest.param("a/b", id="slash"),
        pytest.param("/abs", id="absolute"),
        pytest.param("a b", id="space"),
        pytest.param("aes\n", id="trailing-newline"),
        pytest.param("caf\u00e9", id="non-ascii"),
        pytest.param("x" * 64, id="64-chars"),
    ],
)
def test_invalid_names_are_refused_naming_the_name(name: str) -> None:
    with pytest.raises(InvalidBitstreamName) as info:
        validate_name(name)
    assert repr(name) in str(info.value)
    assert "at most 63 characters" in str(info.value)


# ------------------------------------------------------------- add/list/resolve
def test_raw_round_trip(catalog: Catalog, sources: Path) -> None:
    entry = add_raw(catalog, sources)
    sha = hashlib.sha256(RAW).hexdigest()
    assert (entry.name, entry.size, entry.sha256) == ("aes-v1", len(RAW), sha)
    assert (entry.platform, entry.accelerator_id) == (PLATFORM_ID, "aes")
    assert entry.file == f"aes-v1.{sha[:12]}.bin"
    assert catalog.list() == [entry]
    assert catalog.resolve("aes-v1") == entry
    assert catalog.read_image(entry) == RAW
    assert listing(catalog.directory) == sorted([entry.file, "aes-v1.json"])
    record = json.loads((catalog.directory / "aes-v1.json").read_text())
    assert set(record) == RECORD_KEYS  # a local entry's record has no source (only pulled ones do)
    assert entry.source == ""
    assert record == {key: value for key, value in dataclasses.asdict(entry).items() if key not in ("source", "scope")}


def test_a_whole_card_image_keeps_its_scope_in_its_record(catalog: Catalog, sources: Path) -> None:
    source = write(sources / "full.bin", RAW)
    entry = catalog.add(source, "full-v1", platform=PLATFORM_ID, accelerator_id="full", scope="card")
    assert entry.scope == "card"
    assert json.loads((catalog.directory / "full-v1.json").read_text())["scope"] == "card"
    assert catalog.resolve("full-v1") == entry
    assert add_raw(catalog, sources).scope == "slot"


def test_an_unknown_scope_is_refused_and_adds_nothing(catalog: Catalog, sources: Path) -> None:
    source = write(sources / "full.bin", RAW)
    with pytest.raises(CatalogError, match="scope 'region' is not one of slot, card"):
        catalog.add(source, "full-v1", platform=PLATFORM_ID, accelerator_id="full", scope="region")
    assert catalog.list() == []


def test_a_record_with_an_unknown_scope_is_a_problem_of_the_scan(catalog: Catalog, sources: Path) -> None:
    entry = add_raw(catalog, sources)
    record = catalog.directory / "aes-v1.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "scope": "fabric"}))
    scan = catalog.scan()
    assert scan.entries == []
    assert [p.record for p in scan.problems] == ["aes-v1.json"]
    assert "has scope 'fabric', not one of slot, card" in scan.problems[0].reason
    assert entry.file in listing(catalog.directory)


def test_added_at_is_an_iso_timestamp(catalog: Catalog, sources: Path) -> None:
    entry = add_raw(catalog, sources)
    assert datetime.fromisoformat(entry.added_at).tzinfo is not None


def test_list_is_sorted_by_name(catalog: Catalog, sources: Path) -> None:
    for name in ("zeta", "alpha", "mid.v2"):
        add_raw(catalog, sources, name, data=name.encode() * 10)
    assert [entry.name for entry in catalog.list()] == ["alpha", "mid.v2", "zeta"]


def test_gbs_round_trip_reads_ids_from_the_header(catalog: Catalog, sources: Path) -> None:
    data = build_gbs()
    entry = catalog.add(write(sources / "nlb.gbs", data), "nlb")
    assert (entry.platform, entry.accelerator_id) == (INTERFACE_ID, ACCELERATOR_ID)
    assert (entry.size, entry.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert entry.file.endswith(".gbs")
    assert catalog.read_image(catalog.resolve("nlb")) == PAYLOAD


def test_gbs_is_recognised_by_content_not_suffix(catalog: Catalog, sources: Path) -> None:
    entry = catalog.add(write(sources / "nlb.bin", build_gbs()), "nlb")
    assert entry.platform == INTERFACE_ID
    assert catalog.read_image(entry) == PAYLOAD


def test_gbs_with_agreeing_ids_given(catalog: Catalog, sources: Path) -> None:
    entry = catalog.add(
        write(sources / "nlb.gbs", build_gbs()), "nlb", platform=INTERFACE_UUID, accelerator_id=ACCELERATOR_ID
    )
    assert entry.platform == INTERFACE_ID


@pytest.mark.parametrize(
    ("platform", "accelerator_id", "message"),
    [
        pytest.param(PLATFORM_UUID, None, rf"platform \(interface-uuid\) {PLATFORM_ID} differs", id="platform"),
        pytest.param(None, "f" * 32, r"accelerator id \(accelerator-type-uuid\) f{32} differs", id="accelerator"),
    ],
)
def test_gbs_with_disagreeing_ids_is_refused(
    catalog: Catalog, sources: Path, platform: str | None, accelerator_id: str | None, message: str
) -> None:
    source = write(sources / "nlb.gbs", build_gbs())
    with pytest.raises(CatalogError, match=message):
        catalog.add(source, "nlb", platform=platform, accelerator_id=accelerator_id)
    assert listing(catalog.directory) == []


@pytest.mark.parametrize(
    ("file_name", "data", "message"),
    [
        pytest.param("bad.gbs", b"XeonFPGA\xb7GBSv002" + b"\0" * 64, r"named \.gbs but does not start", id="bad-guid"),
        pytest.param("bad.gbs", build_gbs(length=1 << 20), r"past the end of the file", id="length-past-eof"),
        pytest.param("bad.gbs", build_gbs(b"{oops"), r"not valid JSON", id="bad-json"),
        pytest.param(
            "bad.gbs",
            build_gbs({"afu-image": {"accelerator-clusters": []}}),
            r'"interface-uuid"',
            id="missing-interface-uuid",
        ),
        pytest.param(
            "bad.bin",
            build_gbs(gbs_metadata(accelerator_uuid="nope")),
            r'"accelerator-type-uuid": \'nope\'',
            id="bad-accelerator-uuid",
        ),
    ],
)
def test_malformed_gbs_is_refused_and_leaves_nothing(
    catalog: Catalog, sources: Path, file_name: str, data: bytes, message: str
) -> None:
    source = write(sources / file_name, data)
    with pytest.raises(BitstreamFileError, match=message) as info:
        catalog.add(source, "nlb")
    assert str(source) in str(info.value)
    assert listing(catalog.directory) == []


def test_raw_file_needs_platform_and_accelerator(catalog: Catalog, sources: Path) -> None:
    source = write(sources / "x.bit", RAW)
    with pytest.raises(CatalogError, match=r"not an Intel GBS file.*--platform, --accelerator-id"):
        catalog.add(source, "x", platform=PLATFORM_UUID)
    assert listing(catalog.directory) == []


@pytest.mark.parametrize(
    ("platform", "accelerator_id"),
    [
        pytest.param("", "aes", id="empty-platform"),
        pytest.param(PLATFORM_UUID, "   ", id="blank-accelerator"),
        pytest.param("bad\x00id", "aes", id="control-character"),
        pytest.param("p" * 257, "aes", id="too-long"),
    ],
)
def test_bad_ids_are_refused(catalog: Catalog, sources: Path, platform: str, accelerator_id: str) -> None:
    with pytest.raises(CatalogError, match="must be 1 to 256 printable characters"):
        catalog.add(write(sources / "x.bit", RAW), "x", platform=platform, accelerator_id=accelerator_id)
    assert listing(catalog.directory) == []


def test_an_accelerator_id_that_reads_as_an_option_is_refused(catalog: Catalog, sources: Path) -> None:
    with pytest.raises(CatalogError, match=r"accelerator id '--force' starts with '-'"):
        catalog.add(write(sources / "x.bit", RAW), "x", platform="p", accelerator_id="--force")
    assert listing(catalog.directory) == []


def test_names_are_validated_before_anything_is_written(catalog: Catalog, sources: Path) -> None:
    with pytest.raises(InvalidBitstreamName):
        catalog.add(write(sources / "x.bit", RAW), "../x", platform="p", accelerator_id="a")
    assert not catalog.directory.exists()


@pytest.mark.parametrize(
    ("make_source", "message"),
    [
        pytest.param(lambda d: d / "absent.bit", r"No such file or directory", id="missing"),
        pytest.param(lambda d: write(d / "empty.bit", b""), r"the file is empty", id="empty"),
        pytest.param(lambda d: d, r"Is a directory", id="directory"),
    ],
)
def test_unusable_source(catalog: Catalog, sources: Path, make_source: Callable[[Path], Path], message: str) -> None:
    source = make_source(sources)
    with pytest.raises(BitstreamFileError, match=message) as info:
        catalog.add(source, "x", platform="p", accelerator_id="a")
    assert str(source) in str(info.value)
    assert listing(catalog.directory) == []


def test_existing_name_is_refused_without_replace(catalog: Catalog, sources: Path) -> None:
    first = add_raw(catalog, sources)
    before = listing(catalog.directory)
    with pytest.raises(CatalogError, match=r"'aes-v1' is already in the catalog .*--replace"):
        add_raw(catalog, sources, data=b"other content")
    assert listing(catalog.directory) == before
    assert catalog.resolve("aes-v1") == first


def test_replace_swaps_file_and_record(catalog: Catalog, sources: Path) -> None:
    first = add_raw(catalog, sources)
    source = write(sources / "new.gbs", build_gbs())
    second = catalog.add(source, "aes-v1", replace=True)
    assert second.file != first.file
    assert listing(catalog.directory) == sorted([second.file, "aes-v1.json"])
    assert catalog.resolve("aes-v1") == second
    assert catalog.read_image(second) == PAYLOAD


def test_replace_with_identical_content_keeps_the_file(catalog: Catalog, sources: Path) -> None:
    first = add_raw(catalog, sources)
    second = catalog.add(
        write(sources / "again.bit", RAW), "aes-v1", platform=PLATFORM_ID, accelerator_id="aes-v2", replace=True
    )
    assert second.file == first.file
    assert listing(catalog.directory) == sorted([first.file, "aes-v1.json"])
    assert catalog.read_image(catalog.resolve("aes-v1")) == RAW
    assert catalog.resolve("aes-v1").accelerator_id == "aes-v2"


def test_replace_overwrites_a_malformed_record(catalog: Catalog, sources: Path) -> None:
    catalog.directory.mkdir()
    (catalog.directory / "aes-v1.json").write_text("{broken")
    entry = catalog.add(write(sources / "a.bit", RAW), "aes-v1", platform="p", accelerator_id="a", replace=True)
    assert catalog.resolve("aes-v1") == entry


# ------------------------------------------------------------------ atomicity
def _failing(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_failed_record_write_leaves_nothing(catalog: Catalog, sources: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog_module, "write_atomically", _failing)
    with pytest.raises(BitstreamFileError, match=r"cannot add .* as 'aes-v1': No space left on device"):
        add_raw(catalog, sources)
    assert listing(catalog.directory) == []


def test_failed_replace_keeps_the_old_entry_working(
    catalog: Catalog, sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = add_raw(catalog, sources)
    before = listing(catalog.directory)
    monkeypatch.setattr(catalog_module, "write_atomically", _failing)
    with pytest.raises(BitstreamFileError, match="No space left on device"):
        catalog.add(write(sources / "n.gbs", build_gbs()), "aes-v1", replace=True)
    assert listing(catalog.directory) == before
    assert catalog.read_image(catalog.resolve("aes-v1")) == RAW
    assert catalog.resolve("aes-v1") == first


def test_failed_fsync_of_the_copy_leaves_no_temp_file(
    catalog: Catalog, sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "fsync", _failing)
    with pytest.raises(BitstreamFileError, match="No space left on device"):
        add_raw(catalog, sources)
    assert listing(catalog.directory) == []


def test_failed_copy_leaves_no_temp_file(catalog: Catalog, sources: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog_module, "copy_hashing", _failing)
    with pytest.raises(BitstreamFileError, match="No space left on device"):
        add_raw(catalog, sources)
    assert listing(catalog.directory) == []


# ------------------------------------------------------------------ integrity
@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda data: data[:10] + bytes([data[10] ^ 1]) + data[11:], id="flipped-bit"),
        pytest.param(lambda data: data + b"x", id="appended"),
        pytest.param(lambda data: data[:-1], id="truncated"),
    ],
)
def test_tampered_file_fails_the_hash_check(catalog: Catalog, sources: Path, tamper: Callable[[bytes], bytes]) -> None:
    entry = add_raw(catalog, sources)
    path = catalog.directory / entry.file
    tampered = tamper(path.read_bytes())
    path.write_bytes(tampered)
    with pytest.raises(BitstreamHashError) as info:
        catalog.read_image(catalog.resolve("aes-v1"))
    message = str(info.value)
    assert message.startswith("bitstream 'aes-v1': ")
    assert f"expected {len(RAW)} bytes with sha256 {entry.sha256}" in message
    assert f"found {len(tampered)} bytes with sha256 {hashlib.sha256(tampered).hexdigest()}" in message


def test_missing_file(catalog: Catalog, sources: Path) -> None:
    entry = add_raw(catalog, sources)
    (catalog.directory / entry.file).unlink()
    with pytest.raises(BitstreamFileError, match=rf"bitstream 'aes-v1': file .*{entry.file} is missing"):
        catalog.resolve("aes-v1")
    with pytest.raises(BitstreamFileError, match=r"cannot read .*No such file or directory"):
        catalog.read_image(entry)
    scan = catalog.scan()
    assert scan.entries == []
    assert [(p.record, "is missing" in p.reason) for p in scan.problems] == [("aes-v1.json", True)]


def test_unreadable_file(catalog: Catalog, sources: Path) -> None:
    entry = add_raw(catalog, sources)
    path = catalog.directory / entry.file
    path.unlink()
    path.mkdir()
    with pytest.raises(BitstreamFileError, match=r"cannot read .*Is a directory"):
        catalog.read_image(entry)


def test_read_image_never_follows_a_path(catalog: Catalog, sources: Path) -> None:
    entry = add_raw(catalog, sources)
    outside = write(catalog.directory.parent / "outside.bin", RAW)
    forged = dataclasses.replace(entry, file=f"../{outside.name}")
    with pytest.raises(BitstreamFileError, match=r"is not a plain file name"):
        catalog.read_image(forged)


def test_unknown_and_invalid_names(catalog: Catalog, sources: Path) -> None:
    add_raw(catalog, sources)
    with pytest.raises(UnknownBitstream, match=r"bitstream 'fft' is not in the catalog"):
        catalog.resolve("fft")
    # A valid record outside the catalog directory is never reached through a name.
    (catalog.directory.parent / "secret.json").write_text((catalog.directory / "aes-v1.json").read_text())
    with pytest.raises(InvalidBitstreamName):
        catalog.resolve("../secret")


def test_missing_directory_is_an_empty_catalog(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "absent")
    assert catalog.list() == []
    with pytest.raises(UnknownBitstream):
        catalog.resolve("aes")


# ---------------------------------------------------------------- bad records
def _good_record() -> dict[str, object]:
    return {
        "name": "aes",
        "file": "aes.bin",
        "size": len(RAW),
        "sha256": hashlib.sha256(RAW).hexdigest(),
        "platform": PLATFORM_ID,
        "accelerator_id": "aes",
        "added_at": "2025-01-01T00:00:00+00:00",
    }


def _record(**changes: object) -> str:
    record = _good_record()
    for key, value in changes.items():
        if value is _DROP:
            del record[key]
        else:
            record[key] = value
    return json.dumps(record)


_DROP = object()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("{not json", r"is not valid JSON", id="not-json"),
        pytest.param("[1]", r"is not a JSON object", id="array"),
        pytest.param(_record(sha256=_DROP, size=_DROP), r"lacks size, sha256", id="missing-fields"),
        pytest.param(
            _record(name="other"), r"names bitstream 'other' but is not called other\.json", id="name-mismatch"
        ),
        pytest.param(_record(name="Bad Name"), r"invalid name 'Bad Name'", id="invalid-name"),
        pytest.param(
            _record(file="../aes.bin"), r"file '\.\./aes\.bin', which is not a plain file name", id="file-path"
        ),
        pytest.param(_record(file="/etc/passwd"), r"not a plain file name", id="absolute-file"),
        pytest.param(_record(file="x.json"), r"not a plain file name", id="record-as-file"),
        pytest.param(_record(size=-1), r"size -1, not a positive integer", id="negative-size"),
        pytest.param(_record(size=True), r"size True, not a positive integer", id="bool-size"),
        pytest.param(_record(size="12"), r"size '12', not a positive integer", id="string-size"),
        pytest.param(_record(sha256="ABC"), r"sha256 'ABC', not 64 lower-case hex", id="bad-sha"),
        pytest.param(_record(platform=""), r"has platform '' must be", id="empty-platform"),
        pytest.param(_record(accelerator_id=7), r"has accelerator_id 7 must be", id="numeric-accelerator"),
        pytest.param(_record(added_at=5), r"added_at 5, not a timestamp", id="bad-added-at"),
    ],
)
def test_malformed_records_are_reported_not_raised(
    catalog: Catalog, sources: Path, caplog: pytest.LogCaptureFixture, text: str, reason: str
) -> None:
    good = add_raw(catalog, sources, "good")
    write(catalog.directory / "aes.bin", RAW)
    (catalog.directory / "aes.json").write_text(text)
    scan = catalog.scan()
    assert scan.entries == [good]
    (problem,) = scan.problems
    assert problem.record == "aes.json"
    assert problem.reason.startswith(f"record {catalog.directory / 'aes.json'}")
    assert re.search(reason, problem.reason), problem.reason
    with caplog.at_level(logging.WARNING, logger="agent.programming.catalog"):
        assert catalog.list() == [good]
    assert any("skipping aes.json" in message for message in caplog.messages)
    with pytest.raises(BitstreamFileError, match=reason):
        catalog.resolve("aes")


def test_a_hand_written_record_is_usable(catalog: Catalog) -> None:
    catalog.directory.mkdir()
    write(catalog.directory / "aes.bin", RAW)
    (catalog.directory / "aes.json").write_text(_record(platform=PLATFORM_UUID.upper()))
    entry = catalog.resolve("aes")
    assert entry.platform == PLATFORM_ID
    assert catalog.read_image(entry) == RAW


def test_temp_and_other_files_are_ignored(catalog: Catalog, sources: Path) -> None:
    entry = add_raw(catalog, sources)
    write(catalog.directory / ".tmp-leftover", b"partial")
    write(catalog.directory / ".hidden.json", b"{}")
    write(catalog.directory / "notes.txt", b"hello")
    assert catalog.scan().entries == [entry]
    assert catalog.scan().problems == []


# ------------------------------------------------------------- platform check
@pytest.mark.parametrize(
    "slot_platform",
    [
        pytest.param(PLATFORM_ID, id="same-hex"),
        pytest.param(PLATFORM_UUID.upper(), id="dashed-upper"),
    ],
)
def test_platform_fits(catalog: Catalog, sources: Path, slot_platform: str) -> None:
    check_platform(add_raw(catalog, sources), slot_with_platform(slot_platform))


@pytest.mark.parametrize(
    "slot_platform",
    [
        pytest.param(INTERFACE_ID, id="other-id"),
        pytest.param("Xilinx ZynqMP FPGA Manager", id="manager-name"),
        pytest.param("", id="none"),
    ],
)
def test_platform_mismatch_names_everything(catalog: Catalog, sources: Path, slot_platform: str) -> None:
    entry = add_raw(catalog, sources)
    slot = slot_with_platform(slot_platform)
    with pytest.raises(PlatformMismatch) as info:
        check_platform(entry, slot)
    message = str(info.value)
    assert "'aes-v1'" in message
    assert PLATFORM_ID in message
    assert slot.id in message
    assert (slot_platform or "(none)") in message


def test_manager_name_platforms_match_as_given(catalog: Catalog, sources: Path) -> None:
    name = "Xilinx ZynqMP FPGA Manager"
    entry = catalog.add(write(sources / "z.bit", RAW), "zynq", platform=name, accelerator_id="fir")
    assert entry.platform == name
    check_platform(entry, slot_with_platform(name, card="fpga0", region="region0"))


# ------------------------------------------------------- verified-file cache
def test_unchanged_file_is_hashed_once(catalog: Catalog, sources: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = add_raw(catalog, sources)
    hashed: list[int] = []
    real_sha256 = hashlib.sha256

    def counting_sha256(data: bytes = b"") -> object:
        hashed.append(len(data))
        return real_sha256(data)

    monkeypatch.setattr(catalog_module.hashlib, "sha256", counting_sha256)
    assert catalog.read_image(entry) == RAW
    assert catalog.read_image(entry) == RAW
    assert hashed == [len(RAW)]


def test_file_changed_after_verification_is_caught(catalog: Catalog, sources: Path) -> None:
    entry = add_raw(catalog, sources)
    assert catalog.read_image(entry) == RAW
    stored = catalog.directory / entry.file
    tampered = bytes([RAW[0] ^ 0xFF]) + RAW[1:]  # same size, other content
    stored.write_bytes(tampered)
    with pytest.raises(BitstreamHashError, match=entry.sha256):
        catalog.read_image(entry)


def test_a_record_that_is_a_symbolic_link_is_refused(catalog: Catalog, sources: Path) -> None:
    entry = add_raw(catalog, sources)
    record = catalog.directory / "aes-v1.json"
    moved = sources / "record.json"
    record.rename(moved)
    record.symlink_to(moved)  # a valid record, but not in the catalog itself
    with pytest.raises(BitstreamFileError, match=r"aes-v1\.json: it is a symbolic link, which is refused"):
        catalog.resolve("aes-v1")
    scan = catalog.scan()
    assert scan.entries == []
    assert [problem.record for problem in scan.problems] == ["aes-v1.json"]
    assert entry.name == "aes-v1"


def test_an_image_that_is_a_symbolic_link_is_refused(catalog: Catalog, sources: Path) -> None:
    entry = add_raw(catalog, sources)
    image = catalog.directory / entry.file
    elsewhere = write(sources / "same-bytes.bit", image.read_bytes())
    image.unlink()
    image.symlink_to(elsewhere)
    with pytest.raises(BitstreamFileError, match="is a symbolic link, which is refused"):
        catalog.resolve("aes-v1")
    with pytest.raises(BitstreamFileError, match="it is a symbolic link, which is refused"):
        catalog.read_image(entry)


def test_a_huge_name_from_an_annotation_is_shown_cut_and_escaped() -> None:
    name = "bad\nname" + "n" * 20_000
    with pytest.raises(InvalidBitstreamName) as info:
        validate_name(name)
    message = str(info.value)
    assert "\n" not in message
    assert f"({len(name)} characters)" in message
    assert len(message) < 400
