"""A hand-written protobuf wire codec for the kubelet device-plugin API v1beta1.

Why it exists: the agent and our kubelet stand-in both use the code generated from
our own ``protos/``; a wrong field number there would be shared by both sides and
no test would notice, while a real kubelet would read garbage. This codec shares
nothing with those files. Its schemas are written from the field numbers of the
upstream kubelet API, and the wire format is done by hand: varints, length-delimited
fields, maps as repeated entry messages (key = 1, value = 2), packed or unpacked
repeated numbers. Standard library only.

Messages are plain dicts keyed by the upstream field names. ``decode`` fills in the
proto3 defaults (``""``, ``0``, ``False``, ``[]``, ``{}``, and ``None`` for an absent
sub-message) and skips unknown fields; ``encode`` omits defaults and writes fields in
field-number order, as generated encoders do.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

Message = dict[str, Any]

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_U64 = 1 << 64


class WireError(ValueError):
    """The bytes are not a valid encoding of the expected message."""


class Kind(Enum):
    """The field types the device-plugin API uses."""

    STRING = "string"
    BOOL = "bool"
    INT32 = "int32"
    INT64 = "int64"
    MESSAGE = "message"
    MAP = "map<string, string>"


@dataclass(frozen=True, slots=True)
class Field:
    """One field: number and wire type are what matter; the name is only the dict key."""

    number: int
    name: str
    kind: Kind
    repeated: bool = False
    schema: Schema | None = None  # for Kind.MESSAGE


@dataclass(frozen=True, slots=True)
class Schema:
    """A message type: its fields in field-number order."""

    name: str
    fields: tuple[Field, ...]
    by_number: dict[int, Field] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_number", {f.number: f for f in self.fields})


# ------------------------------------------------------------------------ varints
def encode_varint(value: int) -> bytes:
    """Base-128, least significant group first; negative numbers as 64-bit two's complement."""
    if value < 0:
        value += _U64
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The unsigned value at ``pos`` and the position after it."""
    value = shift = 0
    while True:
        if pos >= len(data):
            raise WireError("truncated varint")
        if shift >= 70:
            raise WireError("varint longer than 10 bytes")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value % _U64, pos


def _signed(value: int, bits: int) -> int:
    value %= 1 << bits
    return value - (1 << bits) if value >> (bits - 1) else value


# ------------------------------------------------------------------------- fields
def iter_fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield ``(field number, wire type, value)``: an int for varints, bytes otherwise."""
    pos = 0
    while pos < len(data):
        tag, pos = decode_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise WireError("field number 0")
        value: int | bytes
        if wire == _VARINT:
            value, pos = decode_varint(data, pos)
        elif wire in (_I64, _I32):
            size = 8 if wire == _I64 else 4
            value, pos = data[pos : pos + size], pos + size
        elif wire == _LEN:
            size, pos = decode_varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        else:
            raise WireError(f"field {number}: unsupported wire type {wire}")
        if pos > len(data):
            raise WireError(f"field {number}: truncated")
        yield number, wire, value


def _tag(number: int, wire: int) -> bytes:
    return encode_varint(number << 3 | wire)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _tag(number, _LEN) + encode_varint(len(payload)) + payload


def _default(f: Field) -> Any:
    if f.kind is Kind.MAP:
        return {}
    if f.repeated:
        return []
    return {Kind.STRING: "", Kind.BOOL: False, Kind.INT32: 0, Kind.INT64: 0, Kind.MESSAGE: None}[f.kind]


def _number(kind: Kind, raw: int) -> int | bool:
    if kind is Kind.BOOL:
        return raw != 0
    return _signed(raw, 32 if kind is Kind.INT32 else 64)


# ------------------------------------------------------------------------- decode
def decode(schema: Schema, data: bytes) -> Message:
    """Parse ``data`` as ``schema``; unknown fields are skipped, as proto3 requires."""
    message: Message = {f.name: _default(f) for f in schema.fields}
    singular_parts: dict[Field, list[bytes]] = {}
    for number, wire, value in iter_fields(data):
        f = schema.by_number.get(number)
        if f is None:
            continue
        if f.kind in (Kind.STRING, Kind.MESSAGE, Kind.MAP):
            payload = _expect_bytes(f, wire, value)
            if f.kind is Kind.MAP:
                key, val = _decode_map_entry(payload)
                message[f.name][key] = val
            elif f.kind is Kind.MESSAGE and f.repeated:
                assert f.schema is not None
                message[f.name].append(decode(f.schema, payload))
            elif f.kind is Kind.MESSAGE:
                singular_parts.setdefault(f, []).append(payload)  # repeats are merged
            else:
                text = _utf8(f, payload)
                if f.repeated:
                    message[f.name].append(text)
                else:
                    message[f.name] = text
        elif f.repeated and wire == _LEN:  # packed numbers
            payload = _expect_bytes(f, wire, value)
            pos = 0
            while pos < len(payload):
                raw, pos = decode_varint(payload, pos)
                message[f.name].append(_number(f.kind, raw))
        elif wire == _VARINT:
            assert isinstance(value, int)
            if f.repeated:
                message[f.name].append(_number(f.kind, value))
            else:
                message[f.name] = _number(f.kind, value)  # the last one wins
        else:
            raise WireError(f"{schema.name}.{f.name}: wire type {wire} for {f.kind.value}")
    for f, parts in singular_parts.items():
        assert f.schema is not None
        message[f.name] = decode(f.schema, b"".join(parts))
    return message


def _expect_bytes(f: Field, wire: int, value: int | bytes) -> bytes:
    if wire != _LEN or not isinstance(value, bytes):
        raise WireError(f"{f.name}: wire type {wire}, expected length-delimited")
    return value


def _utf8(f: Field, payload: bytes) -> str:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError(f"{f.name}: string is not valid UTF-8") from exc


def _decode_map_entry(payload: bytes) -> tuple[str, str]:
    entry = {1: "", 2: ""}
    for number, wire, value in iter_fields(payload):
        if number in entry:
            entry[number] = _utf8(_MAP_ENTRY_FIELD, _expect_bytes(_MAP_ENTRY_FIELD, wire, value))
    return entry[1], entry[2]


_MAP_ENTRY_FIELD = Field(0, "map entry", Kind.STRING)


# ------------------------------------------------------------------------- encode
def encode(schema: Schema, message: Message) -> bytes:
    """Serialize ``message``; missing keys and proto3 defaults are left out."""
    unknown = set(message) - {f.name for f in schema.fields}
    if unknown:
        raise WireError(f"{schema.name} has no fields {sorted(unknown)}")
    out = bytearray()
    for f in schema.fields:
        value = message.get(f.name)
        if value is None:
            continue
        if f.kind is Kind.MAP:
            for key in sorted(value):  # generated encoders write key and value even when empty
                entry = _length_delimited(1, key.encode()) + _length_delimited(2, value[key].encode())
                out += _length_delimited(f.number, entry)
        elif f.kind is Kind.MESSAGE:
            assert f.schema is not None
            for item in value if f.repeated else [value]:
                out += _length_delimited(f.number, encode(f.schema, item))
        elif f.kind is Kind.STRING:
            for text in value if f.repeated else [value]:
                if text or f.repeated:
                    out += _length_delimited(f.number, text.encode())
        elif f.repeated:
            if value:
                out += _length_delimited(f.number, b"".join(encode_varint(int(v)) for v in value))
        elif value:
            out += _tag(f.number, _VARINT) + encode_varint(int(value))
    return bytes(out)


# ------------------------------------------------------------------------ schemas
# Field numbers of the upstream kubelet API, k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1.
def _message(name: str, *fields: Field) -> Schema:
    return Schema(name, fields)


def _strings(number: int, name: str) -> Field:
    return Field(number, name, Kind.STRING, repeated=True)


def _messages(number: int, name: str, schema: Schema) -> Field:
    return Field(number, name, Kind.MESSAGE, repeated=True, schema=schema)


EMPTY = _message("Empty")
DEVICE_PLUGIN_OPTIONS = _message(
    "DevicePluginOptions",
    Field(1, "pre_start_required", Kind.BOOL),
    Field(2, "get_preferred_allocation_available", Kind.BOOL),
)
REGISTER_REQUEST = _message(
    "RegisterRequest",
    Field(1, "version", Kind.STRING),
    Field(2, "endpoint", Kind.STRING),
    Field(3, "resource_name", Kind.STRING),
    Field(4, "options", Kind.MESSAGE, schema=DEVICE_PLUGIN_OPTIONS),
)
NUMA_NODE = _message("NUMANode", Field(1, "ID", Kind.INT64))
TOPOLOGY_INFO = _message("TopologyInfo", _messages(1, "nodes", NUMA_NODE))
DEVICE = _message(
    "Device",
    Field(1, "ID", Kind.STRING),
    Field(2, "health", Kind.STRING),
    Field(3, "topology", Kind.MESSAGE, schema=TOPOLOGY_INFO),
)
LIST_AND_WATCH_RESPONSE = _message("ListAndWatchResponse", _messages(1, "devices", DEVICE))
PREFERRED_ALLOCATION_REQUEST = _message(
    "PreferredAllocationRequest",
    _messages(
        1,
        "container_requests",
        _message(
            "ContainerPreferredAllocationRequest",
            _strings(1, "available_deviceIDs"),
            _strings(2, "must_include_deviceIDs"),
            Field(3, "allocation_size", Kind.INT32),
        ),
    ),
)
PREFERRED_ALLOCATION_RESPONSE = _message(
    "PreferredAllocationResponse",
    _messages(1, "container_responses", _message("ContainerPreferredAllocationResponse", _strings(1, "deviceIDs"))),
)
ALLOCATE_REQUEST = _message(
    "AllocateRequest",
    _messages(1, "container_requests", _message("ContainerAllocateRequest", _strings(1, "devices_ids"))),
)
MOUNT = _message(
    "Mount",
    Field(1, "container_path", Kind.STRING),
    Field(2, "host_path", Kind.STRING),
    Field(3, "read_only", Kind.BOOL),
)
DEVICE_SPEC = _message(
    "DeviceSpec",
    Field(1, "container_path", Kind.STRING),
    Field(2, "host_path", Kind.STRING),
    Field(3, "permissions", Kind.STRING),
)
CDI_DEVICE = _message("CDIDevice", Field(1, "name", Kind.STRING))
CONTAINER_ALLOCATE_RESPONSE = _message(
    "ContainerAllocateResponse",
    Field(1, "envs", Kind.MAP),
    _messages(2, "mounts", MOUNT),
    _messages(3, "devices", DEVICE_SPEC),
    Field(4, "annotations", Kind.MAP),
    _messages(5, "cdi_devices", CDI_DEVICE),
)
ALLOCATE_RESPONSE = _message("AllocateResponse", _messages(1, "container_responses", CONTAINER_ALLOCATE_RESPONSE))
PRE_START_CONTAINER_REQUEST = _message("PreStartContainerRequest", _strings(1, "devices_ids"))
PRE_START_CONTAINER_RESPONSE = _message("PreStartContainerResponse")
