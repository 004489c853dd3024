"""CardLocks: a card is free only when its holder is done and every started kernel call has returned."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agent.errors import ProgrammingTimeout
from agent.programming.cardlock import CardLocks
from tests.unit.programming.cardlocks import busy

NODE = "/dev/dfl-fme.0"
THREAD_WAIT_S = 10.0  # safety net so a broken test fails instead of hanging; never asserted on


FAR_S = 60.0  # a timeout no test reaches


async def test_result_and_exception_pass_through() -> None:
    locks = CardLocks()
    async with locks.hold(NODE, FAR_S, "card 0") as lease:
        assert await lease.run_in_thread(lambda: 42) == 42
        with pytest.raises(ZeroDivisionError):
            await lease.run_in_thread(lambda: 1 // 0)
        assert busy(locks, NODE)
    assert not busy(locks, NODE)


async def test_cancelled_holder_keeps_the_card_until_the_call_returns() -> None:
    locks = CardLocks()
    gate, entered = threading.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def blocking_call() -> str:
        loop.call_soon_threadsafe(entered.set)
        if not gate.wait(THREAD_WAIT_S):
            raise AssertionError("test never released the call")
        return "done"

    async def holder() -> None:
        async with locks.hold(NODE, FAR_S, "card 0") as lease:
            await lease.run_in_thread(blocking_call)

    task = asyncio.create_task(holder())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert busy(locks, NODE)  # the thread is still inside the call

    gate.set()
    async with locks.hold(NODE, FAR_S, "card 0"):  # granted only once the call has returned
        assert gate.is_set()
    assert not busy(locks, NODE)


async def test_timed_out_waiter_does_not_keep_the_card() -> None:
    locks = CardLocks()
    async with locks.hold(NODE, FAR_S, "card 0"):
        message = "card 0 was busy with another programming operation for the whole 0.0 s deadline"
        with pytest.raises(ProgrammingTimeout, match=f"^{message}$"):
            async with locks.hold(NODE, 0.01, "card 0"):
                pytest.fail("got a card that was held")
    assert not busy(locks, NODE)
    async with locks.hold(NODE, FAR_S, "card 0"):
        assert busy(locks, NODE)


async def test_cards_are_independent() -> None:
    locks = CardLocks()
    async with locks.hold(NODE, FAR_S, "card 0"), locks.hold("/dev/dfl-fme.1", FAR_S, "card 1"):
        assert busy(locks, NODE)
        assert busy(locks, "/dev/dfl-fme.1")
    assert not busy(locks, NODE)
