"""Build Intel GBS files for tests, the way OPAE's packager lays them out.

GUID (the ASCII text ``XeonFPGA\\xb7GBSv001``), metadata length as little-endian
uint32, JSON metadata, then the raw bitstream.
"""

from __future__ import annotations

import json
import struct
from typing import Any

GBS_GUID_TEXT = b"XeonFPGA\xb7GBSv001"
INTERFACE_UUID = "69528DB6-EB31-577A-8C36-68F9FAA081F6"
INTERFACE_ID = "69528db6eb31577a8c3668f9faa081f6"
ACCELERATOR_UUID = "D8424DC4-A4A3-C413-F89E-433683F9040B"
ACCELERATOR_ID = "d8424dc4a4a3c413f89e433683f9040b"
PAYLOAD = bytes(range(256)) * 3 + b"end-of-rbf"


def gbs_metadata(interface_uuid: str = INTERFACE_UUID, accelerator_uuid: str = ACCELERATOR_UUID) -> dict[str, Any]:
    """Metadata as the packager writes it (the keys the catalog reads, plus typical others)."""
    return {
        "version": 1,
        "platform-name": "pac_a10",
        "afu-image": {
            "magic-no": 488605312,
            "interface-uuid": interface_uuid,
            "clock-frequency-high": 312.5,
            "power": 50,
            "accelerator-clusters": [
                {"name": "nlb_400", "total-contexts": 1, "accelerator-type-uuid": accelerator_uuid}
            ],
        },
    }


def build_gbs(
    metadata: dict[str, Any] | bytes | None = None,
    payload: bytes = PAYLOAD,
    *,
    guid: bytes = GBS_GUID_TEXT,
    length: int | None = None,
) -> bytes:
    """A GBS file; ``length`` overrides the metadata length field (to build broken ones)."""
    if metadata is None:
        metadata = gbs_metadata()
    raw = metadata if isinstance(metadata, bytes) else json.dumps(metadata).encode()
    declared = len(raw) if length is None else length
    return guid + struct.pack("<I", declared) + raw + payload
