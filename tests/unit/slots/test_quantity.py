"""Slot counts as Kubernetes writes quantities: whole and non-negative, or a clear ValueError."""

from __future__ import annotations

import pytest

from agent.slots.quantity import parse_count


@pytest.mark.parametrize(
    ("value", "count"),
    [
        pytest.param("1", 1, id="string"),
        pytest.param(2, 2, id="number"),
        pytest.param("0", 0, id="zero"),
        pytest.param("2000m", 2, id="milli-whole"),
        pytest.param("1k", 1000, id="kilo"),
        pytest.param("1Ki", 1024, id="kibi"),
        pytest.param("3e2", 300, id="exponent"),
        pytest.param(" 4 ", 4, id="spaces"),
        pytest.param("+4", 4, id="explicit-sign"),
    ],
)
def test_counts(value: object, count: int) -> None:
    assert parse_count(value) == count


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("1.5", id="fraction"),
        pytest.param("500m", id="fraction-milli"),
        pytest.param("1500m", id="fraction-milli-above-one"),
        pytest.param("-1", id="negative"),
        pytest.param("abc", id="text"),
        pytest.param("", id="empty"),
        pytest.param("1X", id="unknown-suffix"),
        pytest.param("1Qi", id="unknown-binary-suffix"),
        pytest.param(True, id="bool"),
        pytest.param(1.0, id="float"),
        pytest.param(1.5, id="float-fraction"),
        pytest.param(None, id="null"),
        pytest.param("Infinity", id="infinity"),
        pytest.param("NaN", id="nan"),
        pytest.param("9e999999999", id="huge-exponent"),
        pytest.param("1E", id="exa-overflows"),
        pytest.param("1" * 80, id="too-long"),
    ],
)
def test_not_counts(value: object) -> None:
    with pytest.raises(ValueError, match=r"not a quantity|not a whole|more than"):
        parse_count(value)
