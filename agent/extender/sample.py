"""The names kube-scheduler asks about, read from the request's bytes: by compiled code where it was built.

At 5000 nodes every prioritize call carries about 500 names, and reading them in
Python (a new string each, hashed, probed in dicts of every node that the other
processes have pushed out of the CPU's caches, then freed) cost more than the
protocol itself in the real-scheduler bench. ``agent/extender/_sample.c`` reads them
from the body's bytes instead, probing compact tables (:class:`RankTable`) that the
one-slot index keeps beside its dicts, and makes strings only of the names the answer
lists. It is built with the package where a C compiler and Python's headers are found
(``setup.py``); elsewhere :data:`COMPILED` is False and every call takes the Python
path, which gives the same answers (the tests run both).

:class:`AskedNames` is the request's ``NodeNames`` as the compiled reader found it:
counted and checked (plain strings only; anything else is parsed whole by
``wire.parse_extender_args``), made into strings only when something iterates them.

For the common pod, one that asks one slot of one bitstream, the whole answer comes from
the bytes (``ranking.ScoreBoard.prioritize_body``): ``one_slot_head`` checks the names as
``count_names`` does and reads the pod (``_podread.c``: it declines, returning None,
whatever it is not sure of), and ``answer`` ranks the names, makes the answer as
``rankwalk.listed`` and ``promises.settle`` would, and encodes it.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator, Sequence
from typing import overload

import orjson

try:
    from agent.extender._sample import (
        MAX_LIMIT,
        RANK_SCALE,
        FastPath,
        RankTable,
        answer,
        best_of,
        count_names,
        one_slot_head,
    )
except ImportError:  # no compiler where the package was installed: the Python path answers alike
    COMPILED = False
    MAX_LIMIT = 0
    RANK_SCALE = 0
else:
    #: Whether the compiled reader is used. ``FPGA_SLOT_EXTENDER_PURE_PYTHON=1`` turns it off (to compare the two
    #: paths on one machine; the answers do not change).
    COMPILED = os.environ.get("FPGA_SLOT_EXTENDER_PURE_PYTHON", "") in ("", "0")

__all__ = [
    "COMPILED",
    "MAX_LIMIT",
    "RANK_SCALE",
    "AskedNames",
    "FastPath",
    "HashedNames",
    "RankTable",
    "answer",
    "asked_names",
    "best_of",
    "one_slot_head",
]

#: The last member of a body as kube-scheduler marshals ExtenderArgs (Pod, Nodes, NodeNames, in that order).
NAMES_MEMBER = b',"NodeNames":['


class AskedNames(Sequence[str]):
    """The request's ``NodeNames``, as positions in its body: counted and checked, strings made only when read."""

    __slots__ = ("_count", "_names", "body", "start")

    def __init__(self, body: bytes, start: int, count: int) -> None:
        #: The request body, and where its names array starts (its '[').
        self.body = body
        self.start = start
        self._count = count
        self._names: list[str] | None = None

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self.names()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AskedNames):
            return self.names() == other.names()
        return self.names() == other

    __hash__ = None  # type: ignore[assignment]  # a sequence of names, compared by value as a list is

    def __repr__(self) -> str:
        return f"AskedNames({self.names()!r})"

    def names(self) -> list[str]:
        """The names as strings (parsed once, when first needed)."""
        if self._names is None:
            self._names = orjson.loads(self.body[self.start : -1])
        return self._names


class HashedNames(Collection[str]):
    """A set of names kept with its :class:`RankTable` where the compiled reader is built, so that
    ``best_of`` tells them apart by their hashes (the nodes whose free copies are all promised)."""

    __slots__ = ("_names", "table")

    def __init__(self) -> None:
        self._names: set[str] = set()
        self.table = RankTable() if COMPILED else None

    def add(self, name: str) -> None:
        self._names.add(name)
        if self.table is not None:
            self.table.put(name, 0)

    def discard(self, name: str) -> None:
        self._names.discard(name)
        if self.table is not None:
            self.table.drop(name)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"HashedNames({sorted(self._names)!r})"


def asked_names(body: bytes) -> tuple[int, AskedNames] | None:
    """Where the body's ``NodeNames`` member starts (its ',') and its names, when the body ends with a plain
    names array as kube-scheduler sends it; None otherwise (the body is then parsed whole)."""
    if not COMPILED:
        return None
    at = body.find(NAMES_MEMBER)  # the pod before it is shorter than the names after it
    if at < 0:
        return None
    start = at + len(NAMES_MEMBER) - 1
    count = count_names(body, start)
    if count < 0:
        return None
    return at, AskedNames(body, start, count)
