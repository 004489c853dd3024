"""Test helper: whether a programmer's card is locked."""

from __future__ import annotations

from agent.programming.cardlock import CardLocks


def busy(cards: CardLocks, node: str) -> bool:
    """True while an operation on ``node`` holds or still waits for the kernel."""
    lock = cards._locks.get(node)
    return lock is not None and lock.locked()
