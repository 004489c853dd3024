"""The five DevicePlugin RPCs, driven over the agent's real unix socket.

The kubelet stand-in talks to a real agent (simulated cards, see ``tests.fakes``);
faults are injected into the simulated fabric and observed on the wire.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from agent._proto.deviceplugin.v1beta1 import api_pb2 as dp
from agent._proto.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from agent.simfpga.fabric import PLATFORM
from agent.slots.model import SlotId
from agent.slots.registry import SlotRegistry, SlotState
from tests.fakes import RESOURCE_NAME, AgentHarness

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
WAIT_S = 5.0


def slot(card: int, region: int) -> str:
    return f"simcard{card}-slot{region}"


def card_slots(card: int, regions: Sequence[int] = range(4)) -> list[str]:
    return [slot(card, region) for region in regions]


ALL = card_slots(0) + card_slots(1)


# ---------------------------------------------------------------- helpers
def health_of(devices: dict[str, dp.Device]) -> dict[str, str]:
    return {device_id: device.health for device_id, device in devices.items()}


def numa_of(device: dp.Device) -> list[int]:
    return [node.ID for node in device.topology.nodes]


async def wait_registry(registry: SlotRegistry, predicate: Callable[[], bool]) -> None:
    """Wait (on the registry's change notifications) until ``predicate()`` holds."""
    async with asyncio.timeout(WAIT_S):
        while not predicate():
            await registry.wait_for_change(registry.version)


async def preferred(
    harness: AgentHarness, available: Sequence[str], must_include: Sequence[str], size: int
) -> list[str]:
    response = await harness.conn.stub.GetPreferredAllocation(
        dp.PreferredAllocationRequest(
            container_requests=[
                dp.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, must_include_deviceIDs=must_include, allocation_size=size
                )
            ]
        )
    )
    assert len(response.container_responses) == 1
    return list(response.container_responses[0].deviceIDs)


async def allocate(harness: AgentHarness, groups: Sequence[Sequence[str]]) -> dp.AllocateResponse:
    return await harness.conn.stub.Allocate(
        dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=g) for g in groups])
    )


def mentions(details: str, needle: str) -> bool:
    """``needle`` appears as a whole word, not counting the 'container request N:' prefix."""
    body = re.sub(r"^container request \d+: ", "", details)
    return re.search(rf"(?<![\w-]){re.escape(needle)}(?![\w-])", body) is not None


def host_file_exists(spec: dp.DeviceSpec) -> bool:
    return Path(spec.host_path).is_file()


def states_by_id(registry: SlotRegistry) -> dict[str, SlotState]:
    return {state.slot.id: state for state in registry.snapshot()}


# ---------------------------------------------------------- GetDevicePluginOptions
async def test_options_ask_for_prestart_and_preferred_allocation(harness: AgentHarness) -> None:
    options = await harness.conn.stub.GetDevicePluginOptions(dp.Empty())
    assert options == dp.DevicePluginOptions(pre_start_required=True, get_preferred_allocation_available=True)


# ------------------------------------------------------------------ ListAndWatch
async def test_first_list_is_complete_with_numa_per_card(harness: AgentHarness) -> None:
    _, first = harness.conn.updates[0]
    assert [d.ID for d in first] == ALL
    assert all(d.health == HEALTHY for d in first)
    assert {d.ID: numa_of(d) for d in first} == {
        **{device_id: [0] for device_id in card_slots(0)},
        **{device_id: [1] for device_id in card_slots(1)},
    }


async def test_health_fault_and_recovery_are_streamed(harness: AgentHarness) -> None:
    conn, target = harness.conn, slot(1, 2)
    harness.fabric.set_health("simcard1", "slot2", False, "region crashed")
    await harness.kubelet.wait_for(lambda: conn.devices[target].health == UNHEALTHY, WAIT_S)
    assert health_of(conn.devices) == {device_id: HEALTHY for device_id in ALL} | {target: UNHEALTHY}
    assert numa_of(conn.devices[target]) == [1]

    harness.fabric.set_health("simcard1", "slot2", True)
    await harness.kubelet.wait_for(lambda: conn.devices[target].health == HEALTHY, WAIT_S)
    assert health_of(conn.devices) == {device_id: HEALTHY for device_id in ALL}
    # initial list, the fault, the recovery: one full list each and nothing else
    assert len(conn.updates) == 3
    assert all(len(devices) == len(ALL) for _, devices in conn.updates)


async def test_unplug_drops_free_slots_keeps_held_one_unhealthy_and_plug_restores(
    harness: AgentHarness,
) -> None:
    conn, held = harness.conn, slot(1, 1)
    await allocate(harness, [[held]])
    harness.fabric.unplug("simcard1")
    after_unplug = {device_id: HEALTHY for device_id in card_slots(0)} | {held: UNHEALTHY}
    await harness.kubelet.wait_for(lambda: health_of(conn.devices) == after_unplug, WAIT_S)
    assert numa_of(conn.devices[held]) == [1]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await allocate(harness, [[held]])
    assert info.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert held in (info.value.details() or "")

    harness.fabric.plug("simcard1")
    await harness.kubelet.wait_for(lambda: health_of(conn.devices) == {device_id: HEALTHY for device_id in ALL}, WAIT_S)
    assert {device_id: numa_of(conn.devices[device_id]) for device_id in card_slots(1)} == {
        device_id: [1] for device_id in card_slots(1)
    }


async def test_second_stream_gets_same_updates_and_ends_cleanly_when_cancelled(
    harness: AgentHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    servicer, conn = harness.agent.servicer, harness.conn
    closed: list[int] = []
    stream_closed = asyncio.Event()
    lifecycle_hook = servicer.on_stream_closed
    assert lifecycle_hook is not None

    def on_stream_closed(generation: int) -> None:
        closed.append(generation)
        lifecycle_hook(generation)
        stream_closed.set()

    monkeypatch.setattr(servicer, "on_stream_closed", on_stream_closed)
    target = slot(0, 3)
    async with grpc.aio.insecure_channel(f"unix://{harness.socket}") as channel:
        call = dp_grpc.DevicePluginStub(channel).ListAndWatch(dp.Empty())
        async with asyncio.timeout(WAIT_S):
            first = await call.read()
        assert isinstance(first, dp.ListAndWatchResponse)
        assert [(d.ID, d.health) for d in first.devices] == [(d, HEALTHY) for d in ALL]
        assert list(first.devices) == list(conn.updates[-1][1])

        harness.fabric.set_health("simcard0", "slot3", False, "overheated")
        async with asyncio.timeout(WAIT_S):
            second = await call.read()
        await harness.kubelet.wait_for(lambda: conn.devices[target].health == UNHEALTHY, WAIT_S)
        assert isinstance(second, dp.ListAndWatchResponse)
        assert {d.ID: d for d in second.devices} == conn.devices

        assert call.cancel()
        assert await call.code() is grpc.StatusCode.CANCELLED
        async with asyncio.timeout(WAIT_S):
            await stream_closed.wait()

    # The plugin side of the cancelled stream is gone; the kubelet's stream still counts.
    generation = closed[0]
    assert servicer.active_streams(generation) == 1
    harness.fabric.set_health("simcard0", "slot3", True)
    await harness.kubelet.wait_for(lambda: conn.devices[target].health == HEALTHY, WAIT_S)
    assert harness.conn is conn
    assert not conn.stream_ended.is_set()
    assert len(harness.kubelet.registrations) == 1


# --------------------------------------------------------- GetPreferredAllocation
PREFERRED_CASES = [
    # available, must_include, size, expected cards (None: any single card)
    pytest.param(ALL, [], 1, None, id="one-slot"),
    pytest.param(ALL, [], 2, None, id="two-slots-one-card"),
    pytest.param(ALL, [], 4, None, id="four-slots-one-card"),
    pytest.param(card_slots(0, [0, 1, 2]) + card_slots(1), [], 4, {"simcard1": 4}, id="four-only-card1-fits"),
    pytest.param(card_slots(0, [0]) + card_slots(1, [0, 1]), [], 2, {"simcard1": 2}, id="two-only-card1-fits"),
    # best fit: the card with the fewest free slots that still fits keeps bigger blocks free
    pytest.param(card_slots(0, [0, 1]) + card_slots(1), [], 2, {"simcard0": 2}, id="two-best-fit"),
    pytest.param(card_slots(0) + card_slots(1, [1, 2, 3]), [], 3, {"simcard1": 3}, id="three-best-fit"),
    pytest.param(ALL, [slot(1, 3)], 1, {"simcard1": 1}, id="must-include-only"),
    pytest.param(ALL, [slot(1, 0)], 2, {"simcard1": 2}, id="must-include-card1-two"),
    pytest.param(ALL, [slot(1, 2)], 4, {"simcard1": 4}, id="must-include-card1-four"),
    pytest.param(ALL, [slot(0, 1), slot(0, 3)], 3, {"simcard0": 3}, id="two-must-include-card0"),
    pytest.param(
        card_slots(0) + card_slots(1, [0, 1]),
        [slot(1, 0)],
        3,
        {"simcard1": 2, "simcard0": 1},
        id="spread-fills-must-include-card-first",
    ),
    pytest.param(ALL, [slot(0, 0), slot(1, 0)], 2, {"simcard0": 1, "simcard1": 1}, id="must-include-is-all"),
]


@pytest.mark.parametrize(("available", "must_include", "size", "expected_cards"), PREFERRED_CASES)
async def test_preferred_allocation(
    harness: AgentHarness,
    available: list[str],
    must_include: list[str],
    size: int,
    expected_cards: dict[str, int] | None,
) -> None:
    chosen = await preferred(harness, available, must_include, size)
    assert len(chosen) == size
    assert len(set(chosen)) == size
    assert set(chosen) <= set(available)
    assert set(must_include) <= set(chosen)
    cards = Counter(device_id.split("-")[0] for device_id in chosen)
    if expected_cards is None:
        assert len(cards) == 1, chosen
    else:
        assert cards == Counter(expected_cards), chosen


async def test_preferred_allocation_keeps_card_then_numa_of_must_include(sock_dir: Path) -> None:
    # Four cards: simcard0/2 on NUMA 0, simcard1/3 on NUMA 1.
    async with AgentHarness.running(sock_dir, sim_cards=4) as harness:
        topology = {d.ID: numa_of(d) for d in harness.conn.devices.values()}
        assert topology[slot(2, 0)] == [0]
        assert topology[slot(3, 0)] == [1]
        # The must_include card has no other free slot: the rest comes from the same NUMA node.
        available = [*card_slots(0), slot(1, 0), *card_slots(2), *card_slots(3)]
        chosen = await preferred(harness, available, [slot(1, 0)], 3)
        assert chosen[0] == slot(1, 0)
        assert all(topology[device_id] == [1] for device_id in chosen), chosen
        # Two cards on that NUMA node have room: the must_include card comes first.
        chosen = await preferred(harness, [*card_slots(1), *card_slots(3)], [slot(3, 2)], 3)
        assert Counter(device_id.split("-")[0] for device_id in chosen) == {"simcard3": 3}, chosen


async def test_preferred_allocation_picks_empty_slots_before_loaded_ones(harness: AgentHarness) -> None:
    registry = harness.agent.registry
    await harness.fabric.program("simcard0", "slot0", "accel")
    await harness.fabric.program("simcard0", "slot1", "accel")

    def loaded() -> bool:
        states = states_by_id(registry)
        return all(states[slot(0, region)].slot.loaded == "accel" for region in (0, 1))

    await wait_registry(registry, loaded)
    assert set(await preferred(harness, card_slots(0), [], 2)) == {slot(0, 2), slot(0, 3)}
    assert await preferred(harness, [slot(0, 0), slot(0, 3)], [], 1) == [slot(0, 3)]
    # A loaded slot is taken only when it is needed to fill the request.
    three = set(await preferred(harness, card_slots(0), [], 3))
    assert {slot(0, 2), slot(0, 3)} < three


PREFERRED_ERRORS = [
    # available, must_include, size, words the message must contain
    pytest.param([slot(0, 0), slot(0, 1), slot(1, 0)], [], 5, ["5", "3"], id="size-above-available"),
    pytest.param([slot(0, 0)], [slot(1, 2)], 1, [slot(1, 2)], id="must-include-not-available"),
    pytest.param([slot(0, 0), "simcard7-slot9"], [], 1, ["simcard7-slot9"], id="unknown-available"),
    pytest.param([slot(0, 0)], ["simcard7-slot9"], 1, ["simcard7-slot9"], id="unknown-must-include"),
    pytest.param([slot(0, 0), slot(0, 2), slot(0, 2)], [], 1, [slot(0, 2)], id="duplicate-available"),
    pytest.param([slot(0, 0), slot(0, 1)], [slot(0, 1), slot(0, 1)], 2, [slot(0, 1)], id="duplicate-must"),
    pytest.param([slot(0, 0), slot(0, 1)], [], 0, ["0"], id="size-zero"),
    pytest.param(ALL, [slot(0, 0), slot(0, 1), slot(0, 2)], 2, ["2", "3"], id="size-below-must-include"),
]


@pytest.mark.parametrize(("available", "must_include", "size", "words"), PREFERRED_ERRORS)
async def test_preferred_allocation_rejects_bad_request(
    harness: AgentHarness, available: list[str], must_include: list[str], size: int, words: list[str]
) -> None:
    registry = harness.agent.registry
    before, version = registry.snapshot(), registry.version
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await preferred(harness, available, must_include, size)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    details = info.value.details() or ""
    assert all(mentions(details, word) for word in words), details
    assert registry.snapshot() == before
    assert registry.version == version


# ---------------------------------------------------------------------- Allocate
async def test_allocate_returns_device_nodes_and_env_in_request_order(harness: AgentHarness) -> None:
    ids = [slot(1, 0), slot(0, 2)]
    response = await allocate(harness, [ids])
    assert len(response.container_responses) == 1
    container = response.container_responses[0]
    dev_dir = harness.config.sim_dev_dir
    assert list(container.devices) == [
        dp.DeviceSpec(
            container_path=f"/dev/fpga-sim/{device_id}",
            host_path=str(dev_dir / f"fpga-sim-{device_id}"),
            permissions="rw",
        )
        for device_id in ids
    ]
    assert all(host_file_exists(spec) for spec in container.devices)
    assert dict(container.envs) == {
        "FPGA_SLOTS": f"{slot(1, 0)},{slot(0, 2)}",
        "FPGA_SLOT_0_ID": slot(1, 0),
        "FPGA_SLOT_0_DEVICE": f"/dev/fpga-sim/{slot(1, 0)}",
        "FPGA_SLOT_0_PLATFORM": PLATFORM,
        "FPGA_SLOT_0_NUMA": "1",
        "FPGA_SLOT_1_ID": slot(0, 2),
        "FPGA_SLOT_1_DEVICE": f"/dev/fpga-sim/{slot(0, 2)}",
        "FPGA_SLOT_1_PLATFORM": PLATFORM,
        "FPGA_SLOT_1_NUMA": "0",
    }
    assert list(container.cdi_devices) == []
    states = states_by_id(harness.agent.registry)
    assert all(states[device_id].holder is not None for device_id in ids)
    assert all(states[device_id].holder is None for device_id in set(ALL) - set(ids))


async def test_allocate_answers_each_container_request(harness: AgentHarness) -> None:
    groups = [[slot(0, 3)], [slot(1, 1), slot(1, 2)], [slot(0, 0)]]
    response = await allocate(harness, groups)
    assert len(response.container_responses) == len(groups)
    for group, container in zip(groups, response.container_responses, strict=True):
        assert container.envs["FPGA_SLOTS"] == ",".join(group)
        assert [spec.container_path for spec in container.devices] == [f"/dev/fpga-sim/{i}" for i in group]
        assert not any(key.startswith(f"FPGA_SLOT_{len(group)}_") for key in container.envs)


ALLOCATE_ERRORS = [
    # container groups, slot made unhealthy first, status, the ID the message names
    pytest.param(
        [[slot(0, 0), "simcard9-slot9"]],
        None,
        grpc.StatusCode.INVALID_ARGUMENT,
        "simcard9-slot9",
        id="unknown",
    ),
    pytest.param([[slot(0, 0)], ["nosuch"]], None, grpc.StatusCode.INVALID_ARGUMENT, "nosuch", id="unknown-in-2nd"),
    pytest.param(
        [[slot(0, 0), slot(0, 1), slot(0, 1)]],
        None,
        grpc.StatusCode.INVALID_ARGUMENT,
        slot(0, 1),
        id="duplicate-in-container",
    ),
    pytest.param(
        [[slot(0, 0), slot(0, 1)], [slot(1, 0), slot(0, 1)]],
        None,
        grpc.StatusCode.INVALID_ARGUMENT,
        slot(0, 1),
        id="duplicate-across-containers",
    ),
    pytest.param(
        [[slot(0, 0)], [slot(1, 3)]],
        slot(1, 3),
        grpc.StatusCode.FAILED_PRECONDITION,
        slot(1, 3),
        id="unhealthy",
    ),
    pytest.param([[slot(0, 0)], []], None, grpc.StatusCode.INVALID_ARGUMENT, "names no slot", id="empty-container"),
]


@pytest.mark.parametrize(("groups", "unhealthy", "code", "named"), ALLOCATE_ERRORS)
async def test_bad_allocate_changes_no_slot_state(
    harness: AgentHarness,
    groups: list[list[str]],
    unhealthy: str | None,
    code: grpc.StatusCode,
    named: str,
) -> None:
    registry, conn = harness.agent.registry, harness.conn
    await harness.kubelet.admit("default", "earlier", "main", RESOURCE_NAME, 1)
    if unhealthy is not None:
        card, region = unhealthy.split("-")
        harness.fabric.set_health(card, region, False, "injected")
        await harness.kubelet.wait_for(lambda: conn.devices[unhealthy].health == UNHEALTHY, WAIT_S)
    before, version = registry.snapshot(), registry.version
    assert sum(state.holder is not None for state in before) == 1

    with pytest.raises(grpc.aio.AioRpcError) as info:
        await allocate(harness, groups)
    assert info.value.code() is code
    assert mentions(info.value.details() or "", named), info.value.details()
    assert registry.snapshot() == before
    assert registry.version == version


async def test_allocate_accepts_slot_still_believed_held(harness: AgentHarness) -> None:
    registry = harness.agent.registry
    admitted = await harness.kubelet.admit("default", "old", "main", RESOURCE_NAME, 1)
    (device_id,) = admitted.device_ids
    old_holder = registry.get(SlotId(device_id))
    assert old_holder is not None
    assert old_holder.holder is not None
    assert old_holder.holder.pod == "old"

    response = await allocate(harness, [[device_id]])
    assert response.container_responses[0].envs["FPGA_SLOTS"] == device_id
    state = registry.get(SlotId(device_id))
    assert state is not None
    assert state.holder is not None
    assert state.holder.pod is None  # replaced by the new, not yet known, holder
    assert state.holder.allocated_at >= old_holder.holder.allocated_at


@pytest.mark.parametrize(("cdi", "expected"), [(True, True), (False, False)], ids=["cdi-on", "cdi-off"])
async def test_allocate_cdi_names(sock_dir: Path, cdi: bool, expected: bool) -> None:
    async with AgentHarness.running(sock_dir, cdi=cdi) as harness:
        ids = [slot(0, 1), slot(1, 2)]
        container = (await allocate(harness, [ids])).container_responses[0]
        names = [device.name for device in container.cdi_devices]
        assert names == ([f"example.com/fpga-slot={device_id}" for device_id in ids] if expected else [])
        assert len(container.devices) == len(ids)  # device nodes are returned either way


# ------------------------------------------------------------- PreStartContainer
async def test_prestart_records_holder_from_pod_resources(harness: AgentHarness) -> None:
    registry = harness.agent.registry
    first = await harness.kubelet.admit("team-a", "trainer", "worker", RESOURCE_NAME, 2)
    second = await harness.kubelet.admit("team-a", "trainer", "sidecar", RESOURCE_NAME, 1)
    third = await harness.kubelet.admit("team-b", "infer", "main", RESOURCE_NAME, 1)
    expected = {
        **{device_id: ("team-a", "trainer", "worker") for device_id in first.device_ids},
        **{device_id: ("team-a", "trainer", "sidecar") for device_id in second.device_ids},
        **{device_id: ("team-b", "infer", "main") for device_id in third.device_ids},
    }
    assert len(expected) == 4
    holders = {}
    for state in registry.snapshot():
        if state.holder is not None:
            holders[state.slot.id] = (state.holder.namespace, state.holder.pod, state.holder.container)
    assert holders == expected


async def test_prestart_rejects_unknown_slot(harness: AgentHarness) -> None:
    registry = harness.agent.registry
    before, version = registry.snapshot(), registry.version
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await harness.conn.stub.PreStartContainer(
            dp.PreStartContainerRequest(devices_ids=[slot(0, 0), "simcard5-slot0"]), timeout=30
        )
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert mentions(info.value.details() or "", "simcard5-slot0"), info.value.details()
    assert registry.snapshot() == before
    assert registry.version == version


async def test_prestart_naming_no_slot_is_rejected_and_acts_on_no_pod(harness: AgentHarness) -> None:
    """An empty list would match every container in pod-resources: the agent would act on an unrelated pod."""
    await harness.kubelet.admit("default", "bystander", "main", RESOURCE_NAME, 1)
    registry = harness.agent.registry
    before, version = registry.snapshot(), registry.version
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await harness.conn.stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=[]), timeout=30)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert mentions(info.value.details() or "", "names no slot"), info.value.details()
    assert registry.snapshot() == before
    assert registry.version == version


async def test_prestart_succeeds_without_pod_resources_socket(harness: AgentHarness) -> None:
    harness.kubelet.pod_resources_socket.unlink()
    await harness.agent.pod_resources.close()  # the agent's next lookup must dial the (gone) socket
    admitted = await harness.kubelet.admit("default", "blind", "main", RESOURCE_NAME, 1)
    (device_id,) = admitted.device_ids
    state = harness.agent.registry.get(SlotId(device_id))
    assert state is not None
    assert state.holder is not None
    assert (state.holder.namespace, state.holder.pod, state.holder.container) == (None, None, None)


async def test_prestart_finds_holder_again_once_pod_resources_is_back(harness: AgentHarness) -> None:
    kubelet, registry = harness.kubelet, harness.agent.registry
    kubelet.pod_resources_socket.unlink()
    await harness.agent.pod_resources.close()  # the agent's next lookup must dial the (gone) socket
    blind = await kubelet.admit("default", "blind", "main", RESOURCE_NAME, 1)
    state = registry.get(SlotId(blind.device_ids[0]))
    assert state is not None
    assert state.holder is not None
    assert state.holder.pod is None

    await kubelet.restart()  # serves pod-resources again
    await kubelet.wait_for(lambda: len(kubelet.registrations) == 2 and len(harness.conn.healthy()) == len(ALL), WAIT_S)
    seen = await kubelet.admit("default", "seen", "main", RESOURCE_NAME, 1)
    state = registry.get(SlotId(seen.device_ids[0]))
    assert state is not None
    assert state.holder is not None
    assert (state.holder.namespace, state.holder.pod, state.holder.container) == ("default", "seen", "main")


HUGE_ID = "evil\n2026-11-24 00:00:00,000 INFO    agent: forged line " + "x" * 16 * 1024


def huge_id_call(stub: Any, rpc: str) -> Any:
    """The call ``rpc`` with HUGE_ID among its device IDs."""
    if rpc == "Allocate":
        request = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=[HUGE_ID])])
        return stub.Allocate(request, timeout=30)
    if rpc == "PreStartContainer":
        return stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=[HUGE_ID]), timeout=30)
    preferred = dp.ContainerPreferredAllocationRequest(available_deviceIDs=[slot(0, 0), HUGE_ID], allocation_size=1)
    return stub.GetPreferredAllocation(dp.PreferredAllocationRequest(container_requests=[preferred]), timeout=30)


@pytest.mark.parametrize("rpc", ["Allocate", "PreStartContainer", "GetPreferredAllocation"])
async def test_a_huge_id_with_a_newline_is_a_short_invalid_argument_that_forges_no_log_line(
    harness: AgentHarness, rpc: str, caplog: pytest.LogCaptureFixture
) -> None:
    """It once came back RESOURCE_EXHAUSTED (the echoed ID overflowed the status header) and forged log lines."""
    registry = harness.agent.registry
    before, version = registry.snapshot(), registry.version
    call = huge_id_call(harness.conn.stub, rpc)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    details = info.value.details() or ""
    assert len(details) < 400, details
    assert "\n" not in details
    assert f"({len(HUGE_ID)} characters)" in details
    assert registry.snapshot() == before
    assert registry.version == version
    for record in caplog.records:
        assert "\n" not in record.getMessage()
        assert len(record.getMessage()) < 2000
