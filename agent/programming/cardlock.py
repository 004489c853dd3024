"""One programming operation at a time per card (keyed by its control node), cards in parallel.

Blocking hardware calls run in worker threads: past a deadline the caller gets its timeout at once,
but the card stays locked until the kernel returns from the call."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from agent.errors import ProgrammingTimeout

logger = logging.getLogger(__name__)

T = TypeVar("T")


class CardLease:
    """Exclusive use of one card until released and every started call has returned."""

    def __init__(self, node: str, lock: asyncio.Lock, deadline: float) -> None:
        self.node = node
        self.deadline = deadline
        self._lock = lock
        self._pending: set[asyncio.Future[Any]] = set()
        self._released = False
        self._unlocked = False

    async def run_in_thread(self, call: Callable[[], T]) -> T:
        """Run a blocking ``call`` in a worker thread; TimeoutError past the deadline (the card stays locked
        until the call returns)."""
        future: asyncio.Future[T] = asyncio.ensure_future(asyncio.to_thread(call))
        self._pending.add(future)
        future.add_done_callback(self._call_returned)
        async with asyncio.timeout_at(self.deadline):
            return await asyncio.shield(future)

    def _call_returned(self, future: asyncio.Future[Any]) -> None:
        self._pending.discard(future)
        if self._released:  # the caller gave up on this call
            if future.cancelled():
                logger.warning("%s: a late hardware call was cancelled", self.node)
            elif future.exception() is not None:
                logger.warning("%s: a late hardware call failed: %s", self.node, future.exception())
            else:
                logger.warning("%s: a late hardware call returned after its caller gave up", self.node)
        self._maybe_unlock()

    def release(self) -> None:
        """Give the card back once every started call has returned."""
        self._released = True
        self._maybe_unlock()

    def _maybe_unlock(self) -> None:
        if self._released and not self._pending and not self._unlocked:
            self._unlocked = True
            self._lock.release()
            logger.debug("%s: free", self.node)


class CardLocks:
    """An asyncio lock per card (keyed by its control node)."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}

    @asynccontextmanager
    async def hold(self, node: str, timeout_s: float, who: str, via: str = "") -> AsyncIterator[CardLease]:
        """Wait at most ``timeout_s`` for the card and hold it for the block, whose lease has the same deadline;
        past it ProgrammingTimeout: '``who`` was busy with another programming operation``via`` ...'."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        lock = self._locks.setdefault(node, asyncio.Lock())
        try:
            async with asyncio.timeout_at(deadline):
                await lock.acquire()
        except TimeoutError as exc:
            raise ProgrammingTimeout(
                f"{who} was busy with another programming operation{via} for the whole {timeout_s:.1f} s deadline"
            ) from exc
        lease = CardLease(node, lock, deadline)
        try:
            yield lease
        finally:
            lease.release()
