"""Validation of the 128-bit identifiers FPGA drivers report (afu_id, compat_id, interface_id)."""

from __future__ import annotations

from agent.files.bitstream import normalize_id128


def parse_id128(raw: str | None, what: str) -> str:
    """A 128-bit id (dashes allowed) as 32 lower-case hex digits; ValueError naming ``what``."""
    if raw is None:
        raise ValueError(f"{what} is missing")
    value = normalize_id128(raw)
    if value is None:
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise ValueError(f"{what} {shown!r} is not 32 hex digits")
    return value


def is_all_ones(value: str) -> bool:
    """An id of all 'f' means the firmware or the region crashed."""
    return set(value) == {"f"}
