"""choose_preferred: the GetPreferredAllocation policy, table-driven plus properties."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.errors import AllocationSizeError, DuplicateSlotError, UnknownSlotError
from agent.slots.allocator import choose_preferred
from agent.slots.registry import SlotState
from tests.unit.slots.factories import make_slot


@dataclass(frozen=True)
class Spec:
    """One slot of a test node: ``card`` letter plus index, e.g. ``a0``."""

    name: str
    numa: int = 0
    loaded: str | None = None
    last_used: float | None = None

    @property
    def card(self) -> str:
        return self.name[:-1]


def node(*specs: Spec) -> dict[str, SlotState]:
    """States keyed by short IDs (the allocator only needs the mapping's keys to match)."""
    return {
        spec.name: SlotState(
            slot=make_slot(spec.card, spec.name, numa=spec.numa, loaded=spec.loaded),
            holder=None,
            last_used=spec.last_used,
            present=True,
        )
        for spec in specs
    }


def card(letter: str, count: int, numa: int = 0) -> list[Spec]:
    return [Spec(f"{letter}{i}", numa=numa) for i in range(count)]


@pytest.mark.parametrize(
    ("specs", "available", "must_include", "size", "expected"),
    [
        pytest.param(
            [*card("a", 3), *card("b", 2)],
            ["a0", "a1", "a2", "b0", "b1"],
            ["b1"],
            2,
            ["b1", "b0"],
            id="must-include-first-then-its-card",
        ),
        pytest.param(
            card("a", 4),
            ["a0", "a1", "a2", "a3"],
            ["a3", "a1"],
            2,
            ["a3", "a1"],
            id="must-include-fills-the-size",
        ),
        pytest.param(
            [*card("a", 4), *card("b", 2)],
            ["a0", "a1", "a2", "a3", "b0", "b1"],
            [],
            2,
            ["b0", "b1"],
            id="best-fit-card-keeps-big-block-free",
        ),
        pytest.param(
            [*card("a", 2), *card("b", 2)],
            ["b0", "b1", "a0", "a1"],
            [],
            2,
            ["a0", "a1"],
            id="equal-fit-tie-broken-by-card-name",
        ),
        pytest.param(
            [*card("a", 3), *card("b", 1), *card("c", 2)],
            ["a0", "a1", "a2", "b0", "c0", "c1"],
            [],
            2,
            ["c0", "c1"],
            id="too-small-card-skipped-for-best-fit",
        ),
        pytest.param(
            [*card("a", 3, numa=0), *card("b", 2, numa=1), *card("c", 1, numa=0)],
            ["a0", "a1", "a2", "b0", "b1", "c0"],
            [],
            4,
            ["a0", "a1", "a2", "c0"],
            id="no-card-fits-largest-then-same-numa",
        ),
        pytest.param(
            [*card("x", 2, numa=0), *card("y", 2, numa=1), *card("z", 2, numa=0)],
            ["x0", "x1", "y0", "y1", "z0", "z1"],
            ["x0"],
            3,
            ["x0", "x1", "z0"],
            id="numa-of-must-include-preferred-over-id",
        ),
        pytest.param(
            [Spec("a0", loaded="aes"), Spec("a1"), Spec("a2", loaded="fft")],
            ["a0", "a1", "a2"],
            [],
            2,
            ["a1", "a0"],
            id="empty-before-loaded",
        ),
        pytest.param(
            [Spec("a0", last_used=50.0), Spec("a1", last_used=10.0), Spec("a2"), Spec("a3", last_used=30.0)],
            ["a0", "a1", "a2", "a3"],
            [],
            3,
            ["a2", "a1", "a3"],
            id="never-used-then-least-recently-used",
        ),
        pytest.param(
            [Spec("a0", loaded="aes", last_used=1.0), Spec("a1", last_used=99.0)],
            ["a0", "a1"],
            [],
            1,
            ["a1"],
            id="empty-outranks-lru",
        ),
        pytest.param(
            card("a", 4),
            ["a3", "a2", "a1", "a0"],
            [],
            2,
            ["a0", "a1"],
            id="tie-broken-by-id-not-offer-order",
        ),
    ],
)
def test_choose_preferred(
    specs: list[Spec], available: list[str], must_include: list[str], size: int, expected: list[str]
) -> None:
    assert choose_preferred(node(*specs), available, must_include, size) == expected


def test_choose_preferred_can_hand_out_everything_offered() -> None:
    states = node(*card("a", 4), *card("b", 4))
    chosen = choose_preferred(states, list(states), ["b2"], 8)
    assert chosen[0] == "b2"
    assert sorted(chosen) == sorted(states)


FOUR = card("a", 2) + card("b", 2)


@pytest.mark.parametrize(
    ("available", "must_include", "size", "error", "message"),
    [
        pytest.param(["a0", "a1"], [], 0, AllocationSizeError, "at least 1, got 0", id="size-zero"),
        pytest.param(["a0", "a1"], [], -1, AllocationSizeError, "at least 1, got -1", id="size-negative"),
        pytest.param(["a0", "a1"], [], 3, AllocationSizeError, "3 exceeds the 2 available", id="too-big"),
        pytest.param(["a0", "a1", "b0"], ["a0", "a1"], 1, AllocationSizeError, "smaller than the 2", id="below-must"),
        pytest.param(
            ["a0", "a1"],
            ["b0"],
            1,
            AllocationSizeError,
            "'b0' is not among the available",
            id="must-not-offered",
        ),
        pytest.param(["a0", "zz9"], [], 1, UnknownSlotError, "'zz9' in available", id="unknown-available"),
        pytest.param(["a0"], ["zz9"], 1, UnknownSlotError, "'zz9' in must_include", id="unknown-must"),
        pytest.param(["a0", "a0"], [], 1, DuplicateSlotError, "'a0' appears twice in available", id="dup-avail"),
        pytest.param(
            ["a0", "a1"],
            ["a1", "a1"],
            2,
            DuplicateSlotError,
            "'a1' appears twice in must_include",
            id="dup-must",
        ),
    ],
)
def test_choose_preferred_rejects(
    available: list[str], must_include: list[str], size: int, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        choose_preferred(node(*FOUR), available, must_include, size)


# ------------------------------------------------------------------ properties
@st.composite
def requests(draw: st.DrawFn) -> tuple[dict[str, SlotState], list[str], list[str], int]:
    specs = []
    for letter in "abcd"[: draw(st.integers(1, 4))]:
        numa = draw(st.integers(0, 1))
        for i in range(draw(st.integers(1, 4))):
            specs.append(
                Spec(
                    f"{letter}{i}",
                    numa=numa,
                    loaded=draw(st.sampled_from([None, "aes", "fft"])),
                    last_used=draw(st.none() | st.floats(0, 1e6)),
                )
            )
    states = node(*specs)
    offered = draw(st.permutations(list(states)))
    available = offered[: draw(st.integers(1, len(offered)))]
    required = draw(st.permutations(available))
    must_include = required[: draw(st.integers(0, len(required)))]
    size = draw(st.integers(max(1, len(must_include)), len(available)))
    return states, available, must_include, size


@given(requests())
def test_choose_preferred_meets_every_valid_request(
    request: tuple[dict[str, SlotState], list[str], list[str], int],
) -> None:
    states, available, must_include, size = request
    chosen = choose_preferred(states, available, must_include, size)
    assert len(chosen) == size
    assert len(set(chosen)) == size
    assert set(chosen) <= set(available)
    assert chosen[: len(must_include)] == must_include


@given(requests(), st.randoms(use_true_random=False))
def test_choose_preferred_ignores_the_offer_order(
    request: tuple[dict[str, SlotState], list[str], list[str], int], rng: random.Random
) -> None:
    states, available, must_include, size = request
    shuffled = list(available)
    rng.shuffle(shuffled)
    assert choose_preferred(states, shuffled, must_include, size) == choose_preferred(
        states, available, must_include, size
    )


@given(requests())
def test_choose_preferred_stays_on_one_card_when_one_fits(
    request: tuple[dict[str, SlotState], list[str], list[str], int],
) -> None:
    states, available, _, size = request
    per_card: dict[str, int] = {}
    for slot_id in available:
        per_card[states[slot_id].slot.card] = per_card.get(states[slot_id].slot.card, 0) + 1
    chosen = choose_preferred(states, available, [], size)
    cards = {states[slot_id].slot.card for slot_id in chosen}
    if max(per_card.values()) >= size:
        assert len(cards) == 1
        # best fit: no card that also fits is smaller than the chosen one
        (used,) = cards
        assert per_card[used] == min(count for count in per_card.values() if count >= size)
