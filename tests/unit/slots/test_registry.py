"""SlotRegistry: discovery merged with holders, whole-request validation, change wake-ups."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

import pytest

from agent.errors import DuplicateSlotError, UnhealthySlotError, UnknownSlotError
from agent.slots.model import Health, Holder, SlotId
from agent.slots.registry import Content, SlotRegistry
from tests.unit.slots.factories import FakeClock, make_slot

A0 = make_slot("card0", "slot0")
A1 = make_slot("card0", "slot1")
B0 = make_slot("card1", "slot0", numa=1)
SICK = make_slot("card1", "slot1", numa=1, health=Health.UNHEALTHY, reason="CRC error")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry(clock: FakeClock) -> SlotRegistry:
    reg = SlotRegistry(clock=clock)
    reg.replace_all([A0, A1, B0, SICK])
    return reg


def listed(registry: SlotRegistry) -> list[str]:
    return [state.slot.id for state in registry.snapshot()]


# ------------------------------------------------------------------ discovery
def test_replace_all_lists_slots_sorted_by_id() -> None:
    registry = SlotRegistry()
    registry.replace_all([B0, A1, A0])
    assert listed(registry) == ["card0-slot0", "card0-slot1", "card1-slot0"]
    assert all(state.present and state.holder is None for state in registry.snapshot())


def test_replace_all_drops_free_slots_that_disappeared(registry: SlotRegistry) -> None:
    registry.replace_all([A0, B0])
    assert listed(registry) == ["card0-slot0", "card1-slot0"]
    assert registry.get(A1.id) is None


def test_replace_all_keeps_a_held_slot_unhealthy_until_released(registry: SlotRegistry) -> None:
    registry.assign([[A1.id]])
    registry.replace_all([A0, B0])

    state = registry.get(A1.id)
    assert state is not None
    assert not state.present
    assert state.health is Health.UNHEALTHY
    assert state.slot.health is Health.HEALTHY  # what it last reported; absence overrides it
    assert state.holder is not None

    registry.release([A1.id])
    assert registry.get(A1.id) is None
    assert listed(registry) == ["card0-slot0", "card1-slot0"]


def test_replace_all_brings_a_held_slot_back(registry: SlotRegistry) -> None:
    registry.assign([[A1.id]])
    registry.replace_all([A0])
    registry.replace_all([A0, A1])
    state = registry.get(A1.id)
    assert state is not None
    assert state.present
    assert state.health is Health.HEALTHY
    assert state.holder is not None


def test_replace_all_takes_new_content(registry: SlotRegistry) -> None:
    programmed = replace(A0, loaded="aes-v1")
    registry.replace_all([programmed, A1, B0, SICK])
    state = registry.get(A0.id)
    assert state is not None
    assert state.slot.loaded == "aes-v1"


def test_upsert_adds_and_updates() -> None:
    registry = SlotRegistry()
    registry.upsert(A0)
    assert listed(registry) == [A0.id]
    registry.upsert(replace(A0, health=Health.UNHEALTHY, reason="hot"))
    state = registry.get(A0.id)
    assert state is not None
    assert state.health is Health.UNHEALTHY
    assert state.slot.reason == "hot"


def test_upsert_of_an_unchanged_slot_is_not_a_change(registry: SlotRegistry) -> None:
    before = registry.version
    registry.upsert(A0)
    assert registry.version == before


def test_upsert_makes_a_vanished_held_slot_present_again(registry: SlotRegistry) -> None:
    registry.assign([[A0.id]])
    registry.remove(A0.id)
    before = registry.version
    registry.upsert(A0)  # same value, but the device is back: that is a change
    assert registry.version == before + 1
    state = registry.get(A0.id)
    assert state is not None
    assert state.present
    assert state.health is Health.HEALTHY


def test_remove_forgets_a_free_slot(registry: SlotRegistry) -> None:
    registry.remove(A0.id)
    assert registry.get(A0.id) is None
    assert A0.id not in listed(registry)


def test_remove_keeps_a_held_slot_listed_unhealthy_until_released(registry: SlotRegistry) -> None:
    registry.assign([[A0.id, A1.id]])
    registry.remove(A0.id)

    state = registry.get(A0.id)
    assert state is not None
    assert state.health is Health.UNHEALTHY
    assert A0.id in listed(registry)

    registry.release([A0.id, A1.id])
    assert registry.get(A0.id) is None
    still_there = registry.get(A1.id)
    assert still_there is not None
    assert still_there.holder is None  # a present slot stays, only free


def test_remove_of_an_unknown_slot_changes_nothing(registry: SlotRegistry) -> None:
    before = registry.version
    registry.remove(SlotId("no-such-slot"))
    assert registry.version == before
    assert len(registry.snapshot()) == 4


# ----------------------------------------------------------------- validation
def test_validate_returns_the_slots_in_request_order(registry: SlotRegistry) -> None:
    assert registry.validate([B0.id, A0.id]) == [B0, A0]


@pytest.mark.parametrize(
    ("ids", "error", "named"),
    [
        pytest.param(["card0-slot0", "ghost"], UnknownSlotError, "'ghost'", id="unknown"),
        pytest.param(["card0-slot0", "card0-slot0"], DuplicateSlotError, "'card0-slot0'", id="duplicate"),
        pytest.param(["card1-slot1"], UnhealthySlotError, "'card1-slot1' is unhealthy: CRC error", id="sick"),
    ],
)
def test_validate_rejects_naming_the_id(
    registry: SlotRegistry, ids: list[str], error: type[Exception], named: str
) -> None:
    before = registry.version
    with pytest.raises(error, match=named):
        registry.validate(ids)
    assert registry.version == before


def test_validate_rejects_a_vanished_held_slot(registry: SlotRegistry) -> None:
    registry.assign([[A0.id]])
    registry.remove(A0.id)
    with pytest.raises(UnhealthySlotError, match="'card0-slot0' is unhealthy: device is gone"):
        registry.validate([A0.id])


# ----------------------------------------------------------------- assignment
def test_assign_records_an_anonymous_holder_per_slot(registry: SlotRegistry, clock: FakeClock) -> None:
    result = registry.assign([[A0.id, A1.id], [B0.id]])
    assert result == [[A0, A1], [B0]]
    for slot in (A0, A1, B0):
        state = registry.get(slot.id)
        assert state is not None
        assert state.holder == Holder(allocated_at=clock.now)
        assert state.last_used == clock.now


@pytest.mark.parametrize(
    ("groups", "error"),
    [
        pytest.param([["card0-slot0"], ["ghost"]], UnknownSlotError, id="unknown-in-second-group"),
        pytest.param([["card0-slot0"], ["card0-slot0"]], DuplicateSlotError, id="same-slot-in-two-groups"),
        pytest.param([["card0-slot1"], ["card1-slot1"]], UnhealthySlotError, id="unhealthy-in-second-group"),
    ],
)
def test_assign_validates_every_group_before_changing_anything(
    registry: SlotRegistry, groups: list[list[str]], error: type[Exception]
) -> None:
    before = registry.version
    with pytest.raises(error):
        registry.assign(groups)
    assert registry.version == before
    assert all(state.holder is None and state.last_used is None for state in registry.snapshot())


def test_assign_accepts_a_slot_still_believed_held(registry: SlotRegistry, clock: FakeClock) -> None:
    registry.assign([[A0.id]])
    registry.set_holder([A0.id], "default", "old-pod", "main")
    clock.advance(5)
    registry.assign([[A0.id]])
    state = registry.get(A0.id)
    assert state is not None
    assert state.holder == Holder(allocated_at=clock.now)


def test_set_holder_fills_in_the_pod_and_keeps_the_allocation_time(registry: SlotRegistry, clock: FakeClock) -> None:
    registry.assign([[A0.id, A1.id]])
    allocated = clock.now
    clock.advance(2)
    registry.set_holder([A0.id, A1.id], "default", "web", "main")
    for slot_id in (A0.id, A1.id):
        state = registry.get(slot_id)
        assert state is not None
        assert state.holder == Holder(allocated, "default", "web", "main")
        assert state.last_used == clock.now


def test_set_holder_without_allocate_uses_now_and_ignores_unknown_ids(registry: SlotRegistry, clock: FakeClock) -> None:
    registry.set_holder([B0.id, SlotId("ghost")], "ns", "pod", "c")
    state = registry.get(B0.id)
    assert state is not None
    assert state.holder == Holder(clock.now, "ns", "pod", "c")
    assert registry.get(SlotId("ghost")) is None


def test_release_frees_slots_and_keeps_last_used(registry: SlotRegistry, clock: FakeClock) -> None:
    registry.assign([[A0.id]])
    used = clock.now
    clock.advance(10)
    registry.release([A0.id])
    state = registry.get(A0.id)
    assert state is not None
    assert state.holder is None
    assert state.last_used == used
    registry.assign([[A0.id]])  # free again: can be handed out


def test_release_of_free_slots_is_not_a_change(registry: SlotRegistry) -> None:
    before = registry.version
    registry.release([A0.id, SlotId("ghost")])
    assert registry.version == before


# -------------------------------------------------------------------- changes
def test_version_increases_by_one_per_change() -> None:
    registry = SlotRegistry()
    assert registry.version == 0
    registry.replace_all([A0, A1])
    assert registry.version == 1
    registry.upsert(B0)
    assert registry.version == 2
    registry.assign([[A0.id]])
    assert registry.version == 3
    registry.set_holder([A0.id], "ns", "pod", "c")
    assert registry.version == 4
    registry.release([A0.id])
    assert registry.version == 5
    registry.remove(B0.id)
    assert registry.version == 6


async def test_wait_for_change_returns_at_once_when_already_changed(registry: SlotRegistry) -> None:
    seen = registry.version
    registry.upsert(replace(A0, loaded="x"))
    assert await registry.wait_for_change(seen) == seen + 1


async def test_wait_for_change_wakes_every_waiter(registry: SlotRegistry) -> None:
    seen = registry.version
    waiting = [asyncio.Event() for _ in range(3)]

    async def waiter(started: asyncio.Event) -> int:
        started.set()  # no await in between: the waiter is parked once the test resumes
        return await registry.wait_for_change(seen)

    tasks = [asyncio.create_task(waiter(started)) for started in waiting]
    for started in waiting:
        await started.wait()
    assert not any(task.done() for task in tasks)

    registry.upsert(replace(B0, health=Health.UNHEALTHY))
    async with asyncio.timeout(5):
        results = await asyncio.gather(*tasks)
    assert results == [seen + 1] * 3


async def test_wait_for_change_keeps_waiting_after_a_non_change(registry: SlotRegistry) -> None:
    seen = registry.version
    started = asyncio.Event()

    async def waiter() -> int:
        started.set()
        return await registry.wait_for_change(seen)

    task = asyncio.create_task(waiter())
    await started.wait()
    registry.upsert(A0)  # unchanged: no wake-up
    registry.release([A0.id])  # not held: no wake-up
    assert registry.version == seen
    registry.remove(A0.id)
    async with asyncio.timeout(5):
        assert await task == seen + 1


async def test_a_cancelled_waiter_does_not_disturb_others(registry: SlotRegistry) -> None:
    seen = registry.version
    started = [asyncio.Event(), asyncio.Event()]

    async def waiter(flag: asyncio.Event) -> int:
        flag.set()
        return await registry.wait_for_change(seen)

    doomed, survivor = (asyncio.create_task(waiter(flag)) for flag in started)
    for flag in started:
        await flag.wait()
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    registry.remove(A1.id)
    async with asyncio.timeout(5):
        assert await survivor == seen + 1


# ------------------------------------------------------------ device version
def _changes_devices(registry: SlotRegistry, change: Callable[[SlotRegistry], None]) -> bool:
    before = registry.device_version
    change(registry)
    return registry.device_version != before


@pytest.mark.parametrize(
    ("change", "devices"),
    [
        pytest.param(lambda r: r.assign([[A0.id]]), False, id="assign"),
        pytest.param(lambda r: r.set_holder([A0.id], "ns", "p", "c"), False, id="holder"),
        pytest.param(lambda r: r.record_content(A0.id, "acc", "x"), False, id="content"),
        pytest.param(lambda r: r.restore(A0.id, None, None, 5.0), False, id="restore"),
        pytest.param(lambda r: r.taint(A0.id, "failed"), True, id="taint"),
        pytest.param(lambda r: r.remove(A1.id), True, id="remove"),
        pytest.param(lambda r: r.upsert(replace(A0, health=Health.UNHEALTHY)), True, id="health"),
    ],
)
def test_device_version_moves_only_when_the_kubelet_list_can_change(
    registry: SlotRegistry, change: Callable[[SlotRegistry], None], devices: bool
) -> None:
    version = registry.version
    assert _changes_devices(registry, change) is devices
    assert registry.version > version


def test_device_version_moves_when_content_clears_a_taint_or_a_vanished_slot_is_released(
    registry: SlotRegistry,
) -> None:
    registry.taint(A0.id, "failed")
    assert _changes_devices(registry, lambda r: r.record_content(A0.id, "acc", "x"))
    registry.assign([[B0.id]])
    registry.remove(B0.id)  # held: stays listed, Unhealthy
    assert not _changes_devices(registry, lambda r: r.release([A1.id]))
    assert _changes_devices(registry, lambda r: r.release([B0.id]))
    assert registry.get(B0.id) is None


async def test_device_waiters_sleep_through_allocations(registry: SlotRegistry) -> None:
    seen = registry.device_version
    waiter = asyncio.ensure_future(registry.wait_for_device_change(seen))
    registry.assign([[A0.id]])
    await asyncio.sleep(0)
    assert not waiter.done()
    registry.taint(A0.id, "failed")
    assert await asyncio.wait_for(waiter, 1.0) == seen + 1


@pytest.mark.parametrize(
    ("reported", "believed"),
    [
        pytest.param("acc-new", "new", id="hardware-reports-the-target"),
        pytest.param(None, None, id="hardware-reports-nothing"),
        pytest.param("acc-old", None, id="hardware-reports-another"),
    ],
)
def test_a_programming_cut_short_is_believed_only_when_the_hardware_reports_its_target(
    reported: str | None, believed: str | None
) -> None:
    registry = SlotRegistry()
    slot = make_slot("card0", "slot0")
    registry.replace_all([replace(slot, loaded=reported)])
    complete = registry.restore(slot.id, Content("old", "acc-old"), None, 1.0, programming=Content("new", "acc-new"))
    state = registry.get(slot.id)
    assert state is not None
    assert state.bitstream == believed
    assert complete is (believed is not None)


def test_the_content_is_unknown_from_the_start_of_a_programming() -> None:
    registry = SlotRegistry()
    slot = make_slot("card0", "slot0")
    registry.replace_all([slot])
    registry.record_content(slot.id, "old", "acc-old")
    registry.begin_programming(slot.id, "new", "acc-new")
    state = registry.get(slot.id)
    assert state is not None
    assert (state.content, state.bitstream, state.programming) == (None, None, Content("new", "acc-new"))
    registry.record_content(slot.id, "new", "acc-new")
    state = registry.get(slot.id)
    assert state is not None
    assert (state.bitstream, state.programming) == ("new", None)
