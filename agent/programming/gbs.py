"""Intel GBS files: a 16-byte GUID, a little-endian u32 length N, N bytes of JSON metadata, then the raw
bitstream. ``afu-image.interface-uuid`` is the platform; the first cluster's ``accelerator-type-uuid``
the accelerator id."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import BinaryIO

from agent.files.bitstream import normalize_id128

GBS_GUID = bytes.fromhex("58656f6e46504741b747425376303031")
_LENGTH = struct.Struct("<I")
HEADER_FIXED_LEN = len(GBS_GUID) + _LENGTH.size
#: The header's key of each id a bitstream is described by.
HEADER_KEYS = {"platform": "interface-uuid", "accelerator id": "accelerator-type-uuid"}


class GbsFormatError(ValueError):
    """The data starts like a GBS file but its header is unusable; the message says why."""


@dataclass(frozen=True, slots=True)
class GbsHeader:
    """What the catalog needs from a GBS header."""

    interface_id: str
    accelerator_id: str
    payload_offset: int


def is_gbs(data: bytes) -> bool:
    return data[: len(GBS_GUID)] == GBS_GUID


def parse_gbs_header(data: bytes) -> GbsHeader:
    """Parse the header of a GBS file held in ``data``; raise GbsFormatError naming the problem."""
    if not is_gbs(data):
        raise GbsFormatError(f"does not start with the GBS GUID {GBS_GUID.hex()}")
    if len(data) < HEADER_FIXED_LEN:
        raise GbsFormatError(f"is {len(data)} bytes, too short for the {HEADER_FIXED_LEN}-byte GBS header")
    (length,) = _LENGTH.unpack_from(data, len(GBS_GUID))
    payload_offset = HEADER_FIXED_LEN + length
    if payload_offset > len(data):
        raise GbsFormatError(f"declares {length} bytes of metadata, past the end of the file ({len(data)} bytes)")
    if length == 0:
        raise GbsFormatError("has no JSON metadata (length 0)")
    try:
        metadata = json.loads(data[HEADER_FIXED_LEN:payload_offset].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GbsFormatError(f"has metadata that is not valid JSON: {exc}") from None
    if not isinstance(metadata, dict):
        raise GbsFormatError("has metadata that is not a JSON object")
    if payload_offset == len(data):
        raise GbsFormatError("has no bitstream after the GBS header")
    afu_image = metadata.get("afu-image")
    if not isinstance(afu_image, dict):
        raise GbsFormatError('has no "afu-image" object in its metadata')
    interface_id = normalize_id128(afu_image.get("interface-uuid"))
    if interface_id is None:
        raise GbsFormatError(f'has no valid "afu-image"."interface-uuid": {afu_image.get("interface-uuid")!r}')
    clusters = afu_image.get("accelerator-clusters")
    if not isinstance(clusters, list) or not clusters or not isinstance(clusters[0], dict):
        raise GbsFormatError('has no "afu-image"."accelerator-clusters" list with an entry')
    raw_accelerator = clusters[0].get("accelerator-type-uuid")
    accelerator_id = normalize_id128(raw_accelerator)
    if accelerator_id is None:
        raise GbsFormatError(f'has no valid "accelerator-clusters"[0]."accelerator-type-uuid": {raw_accelerator!r}')
    return GbsHeader(interface_id, accelerator_id, payload_offset)


def read_gbs_header(stream: BinaryIO) -> GbsHeader | None:
    """The header of the file open in ``stream`` (read from its start), None when not GBS; GbsFormatError."""
    stream.seek(0)
    head = stream.read(HEADER_FIXED_LEN)
    if not is_gbs(head):
        return None
    length = _LENGTH.unpack_from(head, len(GBS_GUID))[0] if len(head) == HEADER_FIXED_LEN else 0
    head += stream.read(length + 1)  # the metadata, and one byte to tell that a bitstream follows
    return parse_gbs_header(head)


def mismatched_id(header: GbsHeader, platform: str | None, accelerator_id: str | None) -> tuple[str, str, str] | None:
    """The first given id the header contradicts, as (``platform`` or ``accelerator id``, given, found); else None."""
    for what, given, found in (
        ("platform", platform, header.interface_id),
        ("accelerator id", accelerator_id, header.accelerator_id),
    ):
        if given is not None and given != found:
            return what, given, found
    return None
