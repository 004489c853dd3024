"""What the catalog holds per bitstream: its entry, its strictly parsed ``<name>.json`` record, and its
file's ids (from a GBS header or given by hand). The directory itself is :class:`agent.programming.catalog.Catalog`."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from agent.errors import BitstreamFileError, CatalogError, PlatformMismatch, shown
from agent.files.bitstream import CARD_SCOPE, SCOPES, SLOT_SCOPE, is_sha256, is_valid_name, normalize_id128
from agent.programming.gbs import HEADER_KEYS, GbsFormatError, mismatched_id, read_gbs_header
from agent.slots.model import Slot

FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_ID_LEN = 256
RECORD_SUFFIX = ".json"
#: Hex digits of a file's sha256 in its installed name.
_HASH_DIGITS = 12
#: The suffixes a bitstream file is stored with (:class:`FileDescription`): a raw image, a GBS file.
RAW_SUFFIX = ".bin"
GBS_SUFFIX = ".gbs"
#: A file as :func:`installed_name` names it.
INSTALLED_FILE = re.compile(
    rf"(?P<name>[a-z0-9][a-z0-9._-]*)\.[0-9a-f]{{{_HASH_DIGITS}}}(?:{re.escape(RAW_SUFFIX)}|{re.escape(GBS_SUFFIX)})"
)
_RECORD_FIELDS = ("name", "file", "size", "sha256", "platform", "accelerator_id", "added_at")


def installed_name(name: str, sha256: str, suffix: str) -> str:
    """``<name>.<first hex digits of its sha256><suffix>``: a new file never takes the name of the one it replaces."""
    return f"{name}.{sha256[:_HASH_DIGITS]}{suffix}"


def normalize_platform_id(raw: str, what: str, accelerator: bool = False) -> str:
    """A platform or accelerator id as the slots report it: a 128-bit id as 32 lower-case hex digits, anything
    else stripped; an ``accelerator`` id may not start with '-' (a tool option). ValueError naming ``what``."""
    value = raw.strip() if isinstance(raw, str) else ""
    if accelerator and value.startswith("-"):
        raise ValueError(f"{what} {shown(raw)} starts with '-', which a vendor tool would read as an option")
    if not value or len(value) > MAX_ID_LEN or not value.isprintable():
        raise ValueError(f"{what} {shown(raw)} must be 1 to {MAX_ID_LEN} printable characters")
    return normalize_id128(value) or value


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One bitstream as its metadata record describes it."""

    name: str
    file: str
    size: int
    sha256: str
    platform: str
    accelerator_id: str
    added_at: str
    #: where the file was pulled from (an FpgaBitstream's source), "" for a local ``catalog add``
    source: str = ""
    #: ``slot`` (an image for one slot) or ``card`` (an image for a whole card); see ``SCOPES``
    scope: str = SLOT_SCOPE


class FileDescription(NamedTuple):
    """What a bitstream file's format says about it: the ids it fits and is, and its stored suffix."""

    platform: str
    accelerator_id: str
    suffix: str


@dataclass(frozen=True, slots=True)
class CatalogProblem:
    """A record that cannot be used, and why."""

    record: str
    reason: str


@dataclass(frozen=True, slots=True)
class CatalogScan:
    """Every usable entry (sorted by name) and every record that is not."""

    entries: list[CatalogEntry]
    problems: list[CatalogProblem]


def check_platform(entry: CatalogEntry, slot: Slot) -> None:
    """Raise PlatformMismatch unless the bitstream fits the slot's PR interface."""
    try:
        slot_platform = normalize_platform_id(slot.platform, "platform")
    except ValueError:
        slot_platform = slot.platform
    if entry.platform != slot_platform:
        raise PlatformMismatch(
            f"bitstream {entry.name!r} is built for platform {entry.platform}, "
            f"but slot {slot.id} has platform {slot.platform or '(none)'}"
        )


def entry_from_record(data: Any, record_name: str) -> CatalogEntry:
    """Validate a parsed record; raise ValueError naming the bad field."""
    if not isinstance(data, dict):
        raise ValueError("is not a JSON object")
    missing = [key for key in _RECORD_FIELDS if key not in data]
    if missing:
        raise ValueError(f"lacks {', '.join(missing)}")
    name = data["name"]
    if not is_valid_name(name):
        raise ValueError(f"has an invalid name {name!r}")
    if name + RECORD_SUFFIX != record_name:
        raise ValueError(f"names bitstream {name!r} but is not called {name + RECORD_SUFFIX}")
    file = data["file"]
    if not isinstance(file, str) or not FILE_NAME.fullmatch(file) or file.endswith(RECORD_SUFFIX):
        raise ValueError(f"has file {file!r}, which is not a plain file name in the catalog directory")
    size = data["size"]
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise ValueError(f"has size {size!r}, not a positive integer")
    sha256 = data["sha256"]
    if not is_sha256(sha256):
        raise ValueError(f"has sha256 {sha256!r}, not 64 lower-case hex digits")
    platform = normalize_platform_id(data["platform"], "has platform")
    accelerator_id = normalize_platform_id(data["accelerator_id"], "has accelerator_id", accelerator=True)
    added_at = data["added_at"]
    if not isinstance(added_at, str):
        raise ValueError(f"has added_at {added_at!r}, not a timestamp string")
    source = data.get("source", "")
    if not isinstance(source, str):
        raise ValueError(f"has source {shown(source)}, not a string")
    scope = data.get("scope", SLOT_SCOPE)
    if scope not in SCOPES:
        raise ValueError(f"has scope {shown(scope)}, not one of {', '.join(SCOPES)}")
    return CatalogEntry(name, file, size, sha256, platform, accelerator_id, added_at, source, scope)


def check_scope(entry: CatalogEntry, scope: str, target: str) -> None:
    """Raise PlatformMismatch unless ``entry`` is an image for a ``scope`` (``slot`` or ``card``), naming ``target``."""
    if entry.scope != scope:
        raise PlatformMismatch(
            f"bitstream {entry.name!r} is an image for a whole card, not for a slot such as {target}"
            if entry.scope == CARD_SCOPE
            else f"bitstream {entry.name!r} is an image for one slot, not for a whole card such as {target}"
        )


def record_bytes(entry: CatalogEntry) -> bytes:
    """The metadata record of ``entry``; a local entry's record has no ``source``, a slot image's no ``scope``."""
    record = asdict(entry)
    if not entry.source:
        del record["source"]
    if entry.scope == SLOT_SCOPE:
        del record["scope"]
    return (json.dumps(record, indent=2) + "\n").encode("utf-8")


def normalize_given_id(value: str | None, what: str, accelerator: bool = False) -> str | None:
    """A platform or (``accelerator``) accelerator id given by hand, normalised; CatalogError naming ``what``."""
    if value is None:
        return None
    try:
        return normalize_platform_id(value, what, accelerator)
    except ValueError as exc:
        raise CatalogError(str(exc)) from None


def describe_bitstream(
    stream: BinaryIO, source: Path, platform: str | None, accelerator_id: str | None
) -> FileDescription:
    """Platform, accelerator id and stored suffix of the file open in ``stream``: from a GBS header (given ids
    must agree), else both must be given. CatalogError or BitstreamFileError naming the problem."""
    try:
        header = read_gbs_header(stream)
    except GbsFormatError as exc:
        raise BitstreamFileError(f"GBS file {source} {exc}") from exc
    if header is None:
        if source.suffix.lower() == GBS_SUFFIX:
            raise BitstreamFileError(f"{source} is named .gbs but does not start with the GBS GUID")
        if platform is None or accelerator_id is None:
            raise CatalogError(
                f"{source} is not an Intel GBS file, so its platform and accelerator id "
                "cannot be read from it: give both (--platform, --accelerator-id)"
            )
        return FileDescription(platform, accelerator_id, RAW_SUFFIX)
    mismatch = mismatched_id(header, platform, accelerator_id)
    if mismatch is not None:
        what, given, found = mismatch
        raise CatalogError(
            f"the given {what} ({HEADER_KEYS[what]}) {given} differs from the GBS header of {source}: {found}"
        )
    return FileDescription(header.interface_id, header.accelerator_id, GBS_SUFFIX)
