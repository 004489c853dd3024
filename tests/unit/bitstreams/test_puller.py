"""The puller's declarations: a relist (the whole list again) reports only what it changed."""

from __future__ import annotations

import dataclasses
from typing import Any

from agent.bitstreams.cache import CacheBudget
from agent.bitstreams.declaration import Declaration
from agent.bitstreams.puller import BitstreamPuller

SHA = "0" * 64


def declaration(name: str, size: int = 1) -> Declaration:
    return Declaration(name, "p", "a", SHA, size, https=f"https://files.example/{name}.bin")


def puller() -> BitstreamPuller:
    unused: Any = None  # declarations touch neither the store nor the sources
    return BitstreamPuller(unused, unused, unused, CacheBudget(1))


def test_an_unchanged_relist_changes_nothing() -> None:
    running = puller()
    a, b = declaration("a"), declaration("b")
    assert running.replace_all([a, b]) == ([a, b], [])
    assert running.replace_all([b, a]) == ([], [])
    assert (running.declared("a"), running.declared("b")) == (a, b)


def test_a_relist_names_the_changed_and_the_withdrawn() -> None:
    running = puller()
    a, b = declaration("a"), declaration("b")
    running.replace_all([a, b])
    bigger = dataclasses.replace(b, size=2)
    c = declaration("c")
    assert running.replace_all([bigger, c]) == ([bigger, c], ["a"])
    assert running.declared("a") is None
    assert running.declared("b") == bigger


def test_a_watch_event_repeating_a_declaration_is_no_change() -> None:
    running = puller()
    a = declaration("a")
    assert running.declare(a) is True
    assert running.declare(dataclasses.replace(a)) is False
    assert running.declare(dataclasses.replace(a, prefetch=True)) is True
    assert running.withdraw("a") is True
    assert running.withdraw("a") is False
