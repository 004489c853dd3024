"""A bitstream's name, ids, scope and file identity, as the node catalog and the pulls (which may not
import each other) share them. Standard library and the error tree only."""

from __future__ import annotations

import hashlib
import re
from typing import BinaryIO, TypeGuard

from agent.errors import InvalidBitstreamName, shown

MAX_NAME_LEN = 63
#: What an image is for: one slot of its platform, or a whole card of it (all its slots as one region).
SLOT_SCOPE = "slot"
CARD_SCOPE = "card"
SCOPES = (SLOT_SCOPE, CARD_SCOPE)
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_HASH_CHUNK = 1 << 20


def is_valid_name(name: object) -> TypeGuard[str]:
    """Whether ``name`` may name a bitstream: ``[a-z0-9][a-z0-9._-]*``, at most :data:`MAX_NAME_LEN` characters."""
    return isinstance(name, str) and len(name) <= MAX_NAME_LEN and _NAME.fullmatch(name) is not None


def validate_name(name: object) -> str:
    """``name`` if it is a valid bitstream name, else InvalidBitstreamName naming it."""
    if not is_valid_name(name):
        raise InvalidBitstreamName(
            f"invalid bitstream name {shown(name)}: use lower-case letters, digits, '.', '_' and '-', "
            f"starting with a letter or digit, at most {MAX_NAME_LEN} characters"
        )
    return name


def is_sha256(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a sha256 as records and declarations write it: 64 lower-case hex digits."""
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None


def normalize_id128(raw: object) -> str | None:
    """A 128-bit id as 32 lower-case hex digits (UUID dashes and 0x allowed), else None."""
    if not isinstance(raw, str):
        return None
    value = raw.strip().lower().replace("-", "").removeprefix("0x")
    return value if _HEX32.fullmatch(value) else None


def copy_hashing(source: BinaryIO, target: BinaryIO | None = None) -> tuple[int, str]:
    """Size and sha256 of what is left to read in ``source``, copied to ``target`` on the way if given."""
    digest = hashlib.sha256()
    size = 0
    while chunk := source.read(_HASH_CHUNK):
        digest.update(chunk)
        if target is not None:
            target.write(chunk)
        size += len(chunk)
    return size, digest.hexdigest()
