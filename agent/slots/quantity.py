"""Quantities of ``example.com/fpga-slot`` as Kubernetes writes them (``"2"``, ``2``, ``"2000m"``, ``"1k"``)."""

from __future__ import annotations

from decimal import Decimal

from agent.errors import shown

_SUFFIXES = {"": Decimal(1), "m": Decimal(10) ** -3}
_SUFFIXES |= {prefix: Decimal(10) ** (3 * power) for power, prefix in enumerate("kMGTPE", 1)}
_SUFFIXES |= {prefix + "i": Decimal(2) ** (10 * power) for power, prefix in enumerate("KMGTPE", 1)}
#: Far more slots than any node has; a larger count is a mistake, not a request.
MAX_SLOTS_PER_CONTAINER = 1 << 20


def parse_count(value: object) -> int:
    """A Kubernetes quantity that must be a whole, non-negative count (``"2"``, ``2``, ``"2000m"``)."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {shown(value)}")
    if isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, str):
        text = value.strip()
        end = len(text)
        while end and not (text[end - 1].isdigit() or text[end - 1] == "."):
            end -= 1
        suffix = text[end:]
        if suffix not in _SUFFIXES or not text[:end] or len(text) > 64:
            raise ValueError(f"not a quantity: {shown(value)}")
        try:
            number = Decimal(text[:end]) * _SUFFIXES[suffix]
        except ArithmeticError:
            raise ValueError(f"not a quantity: {shown(value)}") from None
    else:
        raise ValueError(f"not a quantity: {shown(value)}")
    if not number.is_finite() or number > MAX_SLOTS_PER_CONTAINER:
        raise ValueError(f"more than {MAX_SLOTS_PER_CONTAINER} slots: {shown(value)}")
    if number < 0 or number != number.to_integral_value():
        raise ValueError(f"not a whole, non-negative count: {shown(value)}")
    return int(number)
