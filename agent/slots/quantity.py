"""Quantities of ``example.com/fpga-slot`` as Kubernetes writes them (``"2"``, ``2``, ``"2000m"``, ``"1k"``)."""

from __future__ import annotations

from decimal import Decimal

from agent.errors import shown

_SUFFIXES = {
    "": Decimal(1),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "m": Decimal(10) ** -3,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
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
