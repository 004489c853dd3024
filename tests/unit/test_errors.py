"""How untrusted values are shown in messages: quoted, escaped, bounded."""

from __future__ import annotations

import pytest

from agent.errors import SHOWN_CHARS, SHOWN_ITEMS, shown, shown_list


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("simcard0-slot0", "'simcard0-slot0'", id="plain"),
        pytest.param("a\nb", "'a\\nb'", id="newline-escaped"),
        pytest.param(7, "7", id="number-stays-a-number"),
        pytest.param(None, "None", id="none"),
    ],
)
def test_short_values_are_quoted_and_escaped(value: object, expected: str) -> None:
    assert shown(value) == expected


def test_long_values_are_cut_with_their_length() -> None:
    text = shown("z" * 100_000)
    assert text == repr("z" * SHOWN_CHARS) + "... (100000 characters)"
    assert shown(list(range(10_000))).endswith("characters)")
    assert len(shown(list(range(10_000)))) < SHOWN_CHARS + 40


def test_lists_show_a_bounded_number_of_values() -> None:
    assert shown_list(["a", "b"]) == "['a', 'b']"
    many = shown_list(str(i) for i in range(1000))
    assert many.endswith(", ... (1000 in all)]")
    assert many.count("'") == 2 * SHOWN_ITEMS
