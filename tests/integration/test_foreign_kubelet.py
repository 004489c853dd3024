"""The real agent against a kubelet stand-in that shares none of its code.

Every request and answer here is encoded and decoded by the hand-written codec from
the upstream field numbers, so these tests fail if our ``protos/`` disagree with
the kubelet's API, which tests built on the generated code cannot notice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest

from agent.app import Agent
from tests.fakes import test_config
from tests.integration import foreign_wire as wire
from tests.integration.foreign_kubelet import ForeignKubelet

RESOURCE = "example.com/fpga-slot"
SLOT_IDS = [f"simcard{card}-slot{slot}" for card in range(2) for slot in range(4)]
#: Functional requirement: the agent registers again within 1 s of a kubelet restart.
REREGISTER_DEADLINE_S = 1.0
#: Kubelet restarts in a row: each must be noticed, not only the first.
RESTARTS = 3
#: Only guards against a hang; no test asserts on how fast things are.
HANG_GUARD_S = 10.0


def _card(slot_id: str) -> str:
    return slot_id.split("-")[0]


def _registrations_reach(kubelet: ForeignKubelet, count: int) -> Callable[[], bool]:
    return lambda: len(kubelet.registrations) >= count


def _all_healthy(kubelet: ForeignKubelet) -> bool:
    devices = kubelet.devices(RESOURCE)
    return sorted(devices) == SLOT_IDS and all(d["health"] == "Healthy" for d in devices.values())


@pytest.fixture
async def kubelet(sock_dir: Path) -> AsyncIterator[ForeignKubelet]:
    """The foreign kubelet, once the real agent has registered and listed all 8 slots."""
    config = test_config(sock_dir)
    foreign = ForeignKubelet(config.device_plugin_dir)
    await foreign.start()
    stop = asyncio.Event()
    task = asyncio.create_task(Agent(config).run(stop), name="agent-under-test")
    try:
        await foreign.wait_for(lambda: _all_healthy(foreign), HANG_GUARD_S)
        yield foreign
    finally:
        stop.set()
        try:
            async with asyncio.timeout(HANG_GUARD_S):
                await task
        finally:
            await foreign.stop()


async def test_registration_decodes_with_upstream_field_numbers(kubelet: ForeignKubelet) -> None:
    [registration] = kubelet.registrations
    assert registration.request == {
        "version": "v1beta1",
        "endpoint": "fpga-slot.sock",
        "resource_name": RESOURCE,
        "options": {"pre_start_required": True, "get_preferred_allocation_available": True},
    }
    assert registration.options == {"pre_start_required": True, "get_preferred_allocation_available": True}


async def test_lists_every_slot_healthy_with_its_numa_node(kubelet: ForeignKubelet) -> None:
    devices = kubelet.devices(RESOURCE)
    assert sorted(devices) == SLOT_IDS
    for slot_id, device in devices.items():
        numa = int(_card(slot_id).removeprefix("simcard")) % 2
        assert device == {"ID": slot_id, "health": "Healthy", "topology": {"nodes": [{"ID": numa}]}}


async def test_preferred_allocation_keeps_two_slots_on_one_card(kubelet: ForeignKubelet) -> None:
    request = {"container_requests": [{"available_deviceIDs": SLOT_IDS, "allocation_size": 2}]}
    response = await kubelet.call(
        RESOURCE,
        "GetPreferredAllocation",
        wire.PREFERRED_ALLOCATION_REQUEST,
        request,
        wire.PREFERRED_ALLOCATION_RESPONSE,
    )
    [container] = response["container_responses"]
    chosen = container["deviceIDs"]
    assert len(set(chosen)) == 2
    assert set(chosen) <= set(SLOT_IDS)
    assert len({_card(slot_id) for slot_id in chosen}) == 1


async def test_allocate_and_pre_start_decode(kubelet: ForeignKubelet) -> None:
    chosen = ["simcard1-slot0", "simcard1-slot1"]
    request = {"container_requests": [{"devices_ids": chosen}]}
    response = await kubelet.call(RESOURCE, "Allocate", wire.ALLOCATE_REQUEST, request, wire.ALLOCATE_RESPONSE)
    [container] = response["container_responses"]
    assert container["envs"]["FPGA_SLOTS"] == ",".join(chosen)
    assert [spec["permissions"] for spec in container["devices"]] == ["rw", "rw"]
    host_paths = [Path(spec["host_path"]) for spec in container["devices"]]
    assert all(await asyncio.to_thread(lambda: [path.exists() for path in host_paths]))
    assert all(spec["container_path"].startswith("/") for spec in container["devices"])
    assert (container["mounts"], container["annotations"], container["cdi_devices"]) == ([], {}, [])

    pre_start = await kubelet.call(
        RESOURCE,
        "PreStartContainer",
        wire.PRE_START_CONTAINER_REQUEST,
        {"devices_ids": chosen},
        wire.PRE_START_CONTAINER_RESPONSE,
        timeout_s=30.0,  # the kubelet's deadline
    )
    assert pre_start == {}


async def test_allocate_of_an_unknown_id_is_invalid_argument(kubelet: ForeignKubelet) -> None:
    request = {"container_requests": [{"devices_ids": ["simcard9-slot9"]}]}
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await kubelet.call(RESOURCE, "Allocate", wire.ALLOCATE_REQUEST, request, wire.ALLOCATE_RESPONSE)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "simcard9-slot9" in (info.value.details() or "")


async def test_registers_again_after_every_kubelet_restart(kubelet: ForeignKubelet) -> None:
    first = kubelet.registrations[0]
    for count in range(2, 2 + RESTARTS):
        began = time.monotonic()
        await kubelet.restart()

        await kubelet.wait_for(_registrations_reach(kubelet, count), REREGISTER_DEADLINE_S)
        again = kubelet.registrations[-1]
        after_socket_ms = (again.accepted_at - kubelet.socket_created_at) * 1000
        after_restart_ms = (again.accepted_at - began) * 1000
        print(
            f"restart {count - 1}: re-registered {after_socket_ms:.1f} ms after kubelet.sock appeared"
            f" ({after_restart_ms:.1f} ms after the restart began)"
        )
        assert again.request == first.request

        await kubelet.wait_for(lambda: _all_healthy(kubelet), HANG_GUARD_S)
