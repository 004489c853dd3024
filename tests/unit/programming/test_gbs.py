"""GBS header parsing: ids normalised, payload offset right, every malformed header named."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from agent.programming.gbs import GBS_GUID, GbsFormatError, is_gbs, parse_gbs_header
from tests.unit.programming.gbs_files import (
    ACCELERATOR_ID,
    GBS_GUID_TEXT,
    INTERFACE_ID,
    PAYLOAD,
    build_gbs,
    gbs_metadata,
)


def test_guid_is_the_packagers_ascii_form() -> None:
    assert GBS_GUID == GBS_GUID_TEXT
    assert len(GBS_GUID) == 16


def test_parses_ids_and_payload_offset() -> None:
    data = build_gbs()
    header = parse_gbs_header(data)
    assert header.interface_id == INTERFACE_ID
    assert header.accelerator_id == ACCELERATOR_ID
    assert data[header.payload_offset :] == PAYLOAD
    (length,) = struct.unpack_from("<I", data, 16)
    assert header.payload_offset == 20 + length


@pytest.mark.parametrize(
    ("interface", "accelerator"),
    [
        pytest.param(INTERFACE_ID, ACCELERATOR_ID, id="bare-hex"),
        pytest.param(INTERFACE_ID.upper(), "0x" + ACCELERATOR_ID, id="upper-and-0x"),
    ],
)
def test_ids_are_normalised(interface: str, accelerator: str) -> None:
    header = parse_gbs_header(build_gbs(gbs_metadata(interface, accelerator)))
    assert (header.interface_id, header.accelerator_id) == (INTERFACE_ID, ACCELERATOR_ID)


def test_first_accelerator_cluster_counts() -> None:
    metadata = gbs_metadata()
    metadata["afu-image"]["accelerator-clusters"].append({"accelerator-type-uuid": "0" * 32})
    assert parse_gbs_header(build_gbs(metadata)).accelerator_id == ACCELERATOR_ID


@pytest.mark.parametrize(
    ("data", "data_is_gbs"),
    [
        pytest.param(GBS_GUID_TEXT + b"\0" * 8, True, id="guid"),
        pytest.param(b"\0" + GBS_GUID_TEXT[1:] + b"\0" * 8, False, id="one-byte-off"),
        pytest.param(GBS_GUID_TEXT[:10], False, id="shorter-than-guid"),
        pytest.param(b"", False, id="empty"),
    ],
)
def test_is_gbs(data: bytes, data_is_gbs: bool) -> None:
    assert is_gbs(data) is data_is_gbs


def _without(*path: str | int) -> dict[str, Any]:
    metadata = gbs_metadata()
    node: Any = metadata
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return metadata


def _with(value: object, *path: str | int) -> dict[str, Any]:
    metadata = gbs_metadata()
    node: Any = metadata
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return metadata


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(b"XeonFPGA\xb7GBSv002" + b"\0" * 40, r"does not start with the GBS GUID 58656f6e", id="bad-guid"),
        pytest.param(GBS_GUID_TEXT + b"\x01\x00", r"is 18 bytes, too short", id="truncated-length"),
        pytest.param(build_gbs(length=10_000), r"declares 10000 bytes of metadata, past the end", id="len-past-eof"),
        pytest.param(build_gbs(b"", length=0), r"has no JSON metadata \(length 0\)", id="zero-length"),
        pytest.param(build_gbs(b"{not json"), r"metadata that is not valid JSON", id="bad-json"),
        pytest.param(build_gbs(b"\xff\xfe{}"), r"metadata that is not valid JSON", id="not-utf8"),
        pytest.param(build_gbs(b"[1, 2]"), r"metadata that is not a JSON object", id="json-array"),
        pytest.param(build_gbs(payload=b""), r"no bitstream after the GBS header", id="no-payload"),
        pytest.param(build_gbs(_without("afu-image")), r'no "afu-image" object', id="no-afu-image"),
        pytest.param(
            build_gbs(_without("afu-image", "interface-uuid")),
            r'no valid "afu-image"."interface-uuid": None',
            id="no-interface-uuid",
        ),
        pytest.param(
            build_gbs(_with("not-a-uuid", "afu-image", "interface-uuid")),
            r"\"interface-uuid\": 'not-a-uuid'",
            id="bad-interface-uuid",
        ),
        pytest.param(
            build_gbs(_without("afu-image", "accelerator-clusters")),
            r'no "afu-image"."accelerator-clusters" list',
            id="no-clusters",
        ),
        pytest.param(
            build_gbs(_with([], "afu-image", "accelerator-clusters")),
            r'"accelerator-clusters" list with an entry',
            id="empty-clusters",
        ),
        pytest.param(
            build_gbs(_without("afu-image", "accelerator-clusters", 0, "accelerator-type-uuid")),
            r'no valid "accelerator-clusters"\[0\]."accelerator-type-uuid": None',
            id="no-accelerator-uuid",
        ),
        pytest.param(
            build_gbs(_with(12345, "afu-image", "accelerator-clusters", 0, "accelerator-type-uuid")),
            r'"accelerator-type-uuid": 12345',
            id="numeric-accelerator-uuid",
        ),
    ],
)
def test_malformed_headers_are_named(data: bytes, message: str) -> None:
    with pytest.raises(GbsFormatError, match=message):
        parse_gbs_header(data)


def test_metadata_length_counts_bytes_not_characters() -> None:
    metadata = gbs_metadata()
    metadata["afu-image"]["accelerator-clusters"][0]["name"] = "nlb-\u00e9\u00e9"
    raw = json.dumps(metadata, ensure_ascii=False).encode()
    header = parse_gbs_header(build_gbs(raw))
    assert header.payload_offset == 20 + len(raw)
