"""The byte budget of pulled bitstreams (local entries do not count, pulls in flight reserve their bytes): least
recently used first out, never one in use. Pure bookkeeping: :meth:`CacheBudget.plan` says what to evict."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from agent.errors import CacheFullError


@dataclass(frozen=True, slots=True)
class CachedFile:
    """A pulled catalog entry as the cache sees it."""

    name: str
    size: int
    added_at: str


class CacheBudget:
    """LRU order and reservations of pulled bitstreams under ``budget_bytes``."""

    def __init__(self, budget_bytes: int, in_use: Callable[[], Collection[str]] = frozenset) -> None:
        if budget_bytes <= 0:
            raise ValueError(f"the bitstream cache budget must be positive, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self._in_use = in_use
        self._clock = itertools.count(1)
        self._last_used: dict[str, int] = {}
        self._reserved: dict[str, int] = {}

    def touch(self, name: str) -> None:
        """``name`` was just used: it goes to the back of the eviction order."""
        self._last_used[name] = next(self._clock)

    def forget(self, name: str) -> None:
        self._last_used.pop(name, None)

    def in_use(self) -> set[str]:
        return set(self._in_use()) | set(self._reserved)

    def used_bytes(self, files: Sequence[CachedFile]) -> int:
        """Bytes the cache holds: the pulled files plus the pulls in flight."""
        return sum(f.size for f in files if f.name not in self._reserved) + sum(self._reserved.values())

    def plan(self, files: Sequence[CachedFile], name: str, size: int) -> list[str]:
        """Names to evict (least recently used first) so that ``size`` more bytes for ``name`` fit among the
        pulled ``files`` (an older ``name`` counts as freed); CacheFullError when nothing can make room."""
        if size > self.budget_bytes:
            raise CacheFullError(
                f"bitstream {name!r} is {size} bytes, more than the whole cache budget of {self.budget_bytes} bytes "
                "(--bitstream-cache-bytes)"
            )
        others = [f for f in files if f.name != name]
        free = self.budget_bytes - self.used_bytes(others) - size
        if free >= 0:
            return []
        busy = self.in_use()
        unused = [f for f in others if f.name not in busy]
        candidates = sorted(unused, key=lambda f: (self._last_used.get(f.name, 0), f.added_at))
        evict: list[str] = []
        for candidate in candidates:
            evict.append(candidate.name)
            free += candidate.size
            if free >= 0:
                return evict
        held = sorted(f.name for f in others if f.name in busy)
        raise CacheFullError(
            f"no room for bitstream {name!r} ({size} bytes): the cache budget of {self.budget_bytes} bytes "
            f"(--bitstream-cache-bytes) is held by bitstreams in use: {', '.join(held) or '(pulls in flight)'}"
        )

    @contextmanager
    def reserve(self, name: str, size: int) -> Iterator[None]:
        """Count ``size`` bytes for ``name`` while it is being pulled."""
        self._reserved[name] = size
        try:
            yield
        finally:
            self._reserved.pop(name, None)
