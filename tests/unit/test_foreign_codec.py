"""The hand-written wire codec against our generated classes, in both directions.

The codec's schemas carry the upstream kubelet field numbers; the generated classes
carry ours. Bytes from one parsing into equal messages with the other proves the
two agree field by field, maps and nested repeated messages included.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message as ProtoMessage

from agent._proto.deviceplugin.v1beta1 import api_pb2 as dp
from agent._proto.podresources.v1 import api_pb2 as pr
from tests.integration import foreign_wire as wire
from tests.integration.foreign_wire import Field, Kind, Message, Schema, WireError

CASES: list[Any] = [
    pytest.param(wire.EMPTY, dp.Empty, {}, id="Empty"),
    pytest.param(
        wire.REGISTER_REQUEST,
        dp.RegisterRequest,
        {
            "version": "v1beta1",
            "endpoint": "fpga-slot.sock",
            "resource_name": "example.com/fpga-slot",
            "options": {"pre_start_required": True, "get_preferred_allocation_available": True},
        },
        id="RegisterRequest",
    ),
    pytest.param(wire.REGISTER_REQUEST, dp.RegisterRequest, {"version": "v1beta1", "options": {}}, id="empty-options"),
    pytest.param(
        wire.LIST_AND_WATCH_RESPONSE,
        dp.ListAndWatchResponse,
        {
            "devices": [
                {"ID": "a", "health": "Healthy", "topology": {"nodes": [{"ID": 0}, {"ID": 1}]}},
                {"ID": "b", "health": "Unhealthy", "topology": {"nodes": [{"ID": -1}, {"ID": 2**40}]}},
                {"ID": "c", "health": "Healthy"},
            ]
        },
        id="ListAndWatchResponse",
    ),
    pytest.param(
        wire.PREFERRED_ALLOCATION_REQUEST,
        dp.PreferredAllocationRequest,
        {
            "container_requests": [
                {
                    "available_deviceIDs": ["a", "b", "c"],
                    "must_include_deviceIDs": ["b"],
                    "allocation_size": 2,
                },
                {"available_deviceIDs": ["d", ""], "allocation_size": -3},
            ]
        },
        id="PreferredAllocationRequest",
    ),
    pytest.param(
        wire.PREFERRED_ALLOCATION_RESPONSE,
        dp.PreferredAllocationResponse,
        {"container_responses": [{"deviceIDs": ["a", "b"]}, {}]},
        id="PreferredAllocationResponse",
    ),
    pytest.param(
        wire.ALLOCATE_REQUEST,
        dp.AllocateRequest,
        {"container_requests": [{"devices_ids": ["a"]}, {"devices_ids": ["b", "c"]}]},
        id="AllocateRequest",
    ),
    pytest.param(
        wire.ALLOCATE_RESPONSE,
        dp.AllocateResponse,
        {
            "container_responses": [
                {
                    "envs": {"FPGA_SLOTS": "a,b", "EMPTY": "", "ünïcode": "✓"},
                    "mounts": [
                        {"container_path": "/c", "host_path": "/h", "read_only": True},
                        {"container_path": "/w", "host_path": "/x"},
                    ],
                    "devices": [{"container_path": "/dev/a", "host_path": "/dev/b", "permissions": "rw"}],
                    "annotations": {"example.com/slot": "a"},
                    "cdi_devices": [{"name": "example.com/fpga-slot=a"}],
                },
                {},
            ]
        },
        id="AllocateResponse",
    ),
    pytest.param(
        wire.PRE_START_CONTAINER_REQUEST,
        dp.PreStartContainerRequest,
        {"devices_ids": ["a", "b"]},
        id="PreStartContainerRequest",
    ),
]


@pytest.mark.parametrize(("schema", "generated", "message"), CASES)
def test_codec_bytes_parse_with_the_generated_class(
    schema: Schema, generated: type[ProtoMessage], message: Message
) -> None:
    assert generated.FromString(wire.encode(schema, message)) == generated(**message)


@pytest.mark.parametrize(("schema", "generated", "message"), CASES)
def test_generated_bytes_decode_with_the_codec(schema: Schema, generated: type[ProtoMessage], message: Message) -> None:
    decoded = wire.decode(schema, generated(**message).SerializeToString())
    assert generated(**decoded) == generated(**message)
    assert wire.decode(schema, wire.encode(schema, decoded)) == decoded


@pytest.mark.parametrize(("schema", "generated", "message"), CASES)
def test_codec_bytes_equal_the_generated_encoding(
    schema: Schema, generated: type[ProtoMessage], message: Message
) -> None:
    """Same field order, same omitted defaults, map entries with key and value as generated code writes."""
    assert wire.encode(schema, message) == generated(**message).SerializeToString(deterministic=True)


def test_decoding_fills_in_proto3_defaults() -> None:
    assert wire.decode(wire.DEVICE, b"") == {"ID": "", "health": "", "topology": None}
    assert wire.decode(wire.CONTAINER_ALLOCATE_RESPONSE, b"") == {
        "envs": {},
        "mounts": [],
        "devices": [],
        "annotations": {},
        "cdi_devices": [],
    }


def test_unknown_fields_of_every_wire_type_are_skipped() -> None:
    unknown = b"".join(
        [
            b"\x48\x96\x01",  # field 9 varint
            b"\x51" + bytes(8),  # field 10 fixed64
            b"\x5a\x02hi",  # field 11 length-delimited
            b"\x65" + bytes(4),  # field 12 fixed32
        ]
    )
    data = unknown + dp.Device(ID="a", health="Healthy").SerializeToString()
    assert wire.decode(wire.DEVICE, data) == {"ID": "a", "health": "Healthy", "topology": None}


def test_a_repeated_singular_message_is_merged_and_the_last_scalar_wins() -> None:
    first = dp.RegisterRequest(version="v0", options=dp.DevicePluginOptions(pre_start_required=True))
    second = dp.RegisterRequest(
        version="v1beta1", options=dp.DevicePluginOptions(get_preferred_allocation_available=True)
    )
    data = first.SerializeToString() + second.SerializeToString()
    expected = dp.RegisterRequest.FromString(data)
    assert wire.decode(wire.REGISTER_REQUEST, data) == {
        "version": expected.version,
        "endpoint": "",
        "resource_name": "",
        "options": {"pre_start_required": True, "get_preferred_allocation_available": True},
    }


# The device-plugin API has no repeated numbers; pod-resources' ContainerResources does.
CONTAINER_RESOURCES = Schema(
    "ContainerResources", (Field(1, "name", Kind.STRING), Field(3, "cpu_ids", Kind.INT64, repeated=True))
)


def test_repeated_numbers_are_packed_and_read_packed_or_unpacked() -> None:
    cpu_ids = [0, 3, -1, 2**40]
    message: Message = {"name": "c", "cpu_ids": cpu_ids}
    generated = pr.ContainerResources(name="c", cpu_ids=cpu_ids)
    assert wire.encode(CONTAINER_RESOURCES, message) == generated.SerializeToString()
    unpacked = b"\x0a\x01c" + b"".join(b"\x18" + wire.encode_varint(v) for v in cpu_ids)
    assert wire.decode(CONTAINER_RESOURCES, unpacked) == message
    assert pr.ContainerResources.FromString(unpacked) == generated


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        pytest.param(b"\x0a\x05ab", "truncated", id="short-string"),
        pytest.param(b"\x0a", "truncated varint", id="missing-length"),
        pytest.param(b"\x08" + b"\xff" * 10 + b"\x01", "longer than 10 bytes", id="long-varint"),
        pytest.param(b"\x0a\x01\xff", "UTF-8", id="bad-utf8"),
        pytest.param(b"\x08\x01", "wire type 0", id="string-as-varint"),
        pytest.param(b"\x0b", "wire type 3", id="group"),
        pytest.param(b"\x00", "field number 0", id="field-zero"),
    ],
)
def test_malformed_input_is_rejected(data: bytes, complaint: str) -> None:
    with pytest.raises(WireError, match=complaint):
        wire.decode(wire.DEVICE, data)


def test_encoding_an_unknown_field_name_is_an_error() -> None:
    with pytest.raises(WireError, match="deviceIDs"):
        wire.encode(wire.ALLOCATE_REQUEST, {"deviceIDs": ["a"]})


@pytest.mark.parametrize("module", ["foreign_wire.py", "foreign_kubelet.py"])
def test_the_foreign_kubelet_shares_no_code_with_the_agent(module: str) -> None:
    """Its independence is the point: it must not import the agent or its generated code."""
    tree = ast.parse((Path(__file__).parents[1] / "integration" / module).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {name for name in imported if name.split(".")[0] in ("agent", "google")}
