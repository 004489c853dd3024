"""The agent in DRA mode with whole cards on, through the kubelet's gRPC and the API server stand-in: the pool's
counters in their own slice, a card device beside its slots, a card claim prepared, health reaching the card, and
the counters' slice gone once the agent runs without whole cards."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import aiohttp

from agent.app import connect_kube
from agent.bitstreams.declaration import declaration_object
from agent.dra.cards import CARD_TAINT
from agent.dra.constants import DRIVER_NAME
from agent.dra.mode import UNHEALTHY_TAINT
from agent.kube.resourceslices import CounterSet, ResourceSlicePublisher, SliceDevice
from agent.simfpga.fabric import PLATFORM
from tests.fakeapi import DEFAULT_NODE, FakeKubeApiServer, running_apiserver
from tests.integration.bitstreams.servers import Registry
from tests.integration.reconfigure.support import Bitstreams, fabric_log, push_artifact, state
from tests.integration.reconfigure.test_dra_mode import SLICE, DraNode, config_for, dra_node, taints, until

COUNTERS = f"{SLICE}-counters"
CARD_IMAGE = "card-image"


def add_card_image(bitstreams: Bitstreams, root: Path) -> None:
    source = root / "card-image.bin"
    source.write_bytes(b"a whole-card image\n" * 64)
    bitstreams.catalog.add(source, CARD_IMAGE, platform=PLATFORM, accelerator_id="sim-card", scope="card")


def spec_of(node: DraNode, name: str) -> dict[str, Any]:
    found = node.api.resource_slice(name)
    assert found is not None, f"no ResourceSlice {name}"
    spec: dict[str, Any] = found["spec"]
    return spec


def card_slots(node: DraNode, card: str) -> list[str]:
    return sorted(s.slot.id for s in node.agent.registry.snapshot() if s.slot.card == card)


async def test_each_card_is_offered_whole_beside_its_slots_sharing_one_counter_per_slot(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    async with dra_node(sock_dir, bitstreams, whole_cards=True) as node:
        await until(
            "both slices", lambda: None not in (node.api.resource_slice(SLICE), node.api.resource_slice(COUNTERS))
        )
        devices, counters = spec_of(node, SLICE), spec_of(node, COUNTERS)
        assert devices["pool"] == counters["pool"] == {"name": DEFAULT_NODE, "generation": 1, "resourceSliceCount": 2}
        cards = sorted({s.slot.card for s in node.agent.registry.snapshot()})
        assert [c["name"] for c in counters["sharedCounters"]] == [f"card-{card}" for card in cards]
        by_name = {d["name"]: d for d in devices["devices"]}
        for card in cards:
            slots = card_slots(node, card)
            counter_set = next(c for c in counters["sharedCounters"] if c["name"] == f"card-{card}")
            assert counter_set["counters"] == {s: {"value": "1"} for s in slots}
            whole = by_name[f"card-{card}"]
            assert whole["consumesCounters"] == [{"counterSet": f"card-{card}", "counters": counter_set["counters"]}]
            assert whole["taints"] == [{"key": CARD_TAINT, "effect": "NoSchedule"}]
            assert whole["attributes"]["kind"] == {"string": "card"}
            assert whole["attributes"]["slots"] == {"int": len(slots)}
            assert whole["capacity"] == {f"{DRIVER_NAME}/card": {"value": "1"}}
            for slot_id in slots:
                assert by_name[slot_id]["attributes"]["kind"] == {"string": "slot"}
                assert by_name[slot_id]["consumesCounters"] == [
                    {"counterSet": f"card-{card}", "counters": {slot_id: {"value": "1"}}}
                ]


async def test_a_card_claim_is_prepared_over_grpc_with_every_slots_cdi_device(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    add_card_image(bitstreams, sock_dir)
    async with dra_node(sock_dir, bitstreams, whole_cards=True) as node:
        await until("the slice", lambda: node.api.resource_slice(SLICE) is not None)
        slots = card_slots(node, "simcard0")
        ref = node.claim("big", ["card-simcard0"], {"bitstream": CARD_IMAGE})
        with fabric_log(node.agent.backend.fabric) as log:  # type: ignore[arg-type]
            answer = await asyncio.to_thread(node.kubelet.prepare, ref)
            assert log.programming()
        result = answer.claims[ref[1]]
        assert result.error == ""
        (device,) = result.devices
        assert device.device_name == "card-simcard0"
        assert list(device.cdi_device_ids) == [f"{DRIVER_NAME}/slot={ref[1]}-{s}" for s in slots]
        await until("the card's image in the slice", lambda: node.devices()["card-simcard0"]["bitstream"] == CARD_IMAGE)
        assert all(node.devices()[s]["bitstream"] == "" for s in slots)
        assert all(state(node.agent.registry, s).holder is not None for s in slots)
        released = await asyncio.to_thread(node.kubelet.unprepare, ref)
        assert released.claims[ref[1]].error == ""
        assert all(state(node.agent.registry, s).holder is None for s in slots)


async def test_an_unhealthy_slot_taints_its_card_too(sock_dir: Path, bitstreams: Bitstreams) -> None:
    async with dra_node(sock_dir, bitstreams, whole_cards=True) as node:
        await until("the slice", lambda: node.api.resource_slice(SLICE) is not None)
        fabric = node.agent.backend.fabric
        assert fabric is not None
        target = card_slots(node, "simcard1")[0]
        region = state(node.agent.registry, target).slot.region
        fabric.set_health("simcard1", region, False, "port error")
        unhealthy = {"key": UNHEALTHY_TAINT, "effect": "NoSchedule"}
        await until("the slot and its card tainted", lambda: unhealthy in taints(node).get("card-simcard1", []))
        assert taints(node)[target] == [unhealthy]
        assert unhealthy not in taints(node)["card-simcard0"]
        fabric.set_health("simcard1", region, True, "")
        await until(
            "the card's own taint only",
            lambda: taints(node)["card-simcard1"] == [{"key": CARD_TAINT, "effect": "NoSchedule"}],
        )


async def test_the_counters_slice_goes_when_no_card_is_offered_any_more_and_is_looked_for_once(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    with running_apiserver() as api:
        api.add_node(DEFAULT_NODE)
        kube = connect_kube(config_for(sock_dir, api))
        slot_device = SliceDevice("slot-0", {"kind": "slot"}, consumes=(("card-0", ("slot-0",)),))
        publisher = ResourceSlicePublisher(kube.api_client, DRIVER_NAME, DEFAULT_NODE)
        publisher.set_devices([slot_device], [CounterSet("card-0", ("slot-0",))])
        assert await asyncio.to_thread(publisher.reconcile) == "created,created"
        assert spec_of_api(api, COUNTERS)["sharedCounters"] == [
            {"name": "card-0", "counters": {"slot-0": {"value": "1"}}}
        ]
        publisher.set_devices([SliceDevice("slot-0", {})])
        assert await asyncio.to_thread(publisher.reconcile) == "replaced,deleted"
        assert api.resource_slice(COUNTERS) is None
        assert spec_of_api(api, SLICE)["pool"]["resourceSliceCount"] == 1
        assert await asyncio.to_thread(publisher.reconcile) == "unchanged"  # not looked for again

        restarted = ResourceSlicePublisher(kube.api_client, DRIVER_NAME, DEFAULT_NODE)  # an earlier run's may be there
        restarted.set_devices([SliceDevice("slot-0", {})])
        deletes = len(api.requests("DELETE"))
        assert await asyncio.to_thread(restarted.reconcile) == "unchanged"
        assert await asyncio.to_thread(restarted.reconcile) == "unchanged"
        assert len(api.requests("DELETE")) == deletes + 1


def spec_of_api(api: FakeKubeApiServer, name: str) -> dict[str, Any]:
    found = api.resource_slice(name)
    assert found is not None, f"no ResourceSlice {name}"
    spec: dict[str, Any] = found["spec"]
    return spec


async def test_a_whole_card_image_only_the_cluster_declares_is_pulled_as_one_and_programs_the_card(
    sock_dir: Path, bitstreams: Bitstreams, registry: Registry, session: aiohttp.ClientSession
) -> None:
    source = sock_dir / "full.bin"
    source.write_bytes(b"a whole-card image only a registry holds\n" * 2048)
    declaration = dataclasses.replace(await push_artifact(session, registry, source, "full", PLATFORM), scope="card")
    async with dra_node(sock_dir, bitstreams, whole_cards=True, bitstream_plain_http=(registry.address,)) as node:
        node.api.put_fpga_bitstream(declaration_object(declaration))
        await until("the slice", lambda: node.api.resource_slice(SLICE) is not None)
        distribution = node.agent.distribution
        await until(
            "the declaration at the agent",
            lambda: (
                distribution is not None
                and distribution.puller is not None
                and distribution.puller.declared("full") is not None
            ),
        )
        ref = node.claim("big", ["card-simcard1"], {"bitstream": "full"})
        answer = await asyncio.to_thread(node.kubelet.prepare, ref)
        assert answer.claims[ref[1]].error == ""
        assert bitstreams.catalog.resolve("full").scope == "card"
        assert {state(node.agent.registry, s).bitstream for s in card_slots(node, "simcard1")} == {"full"}
        await until("the card's image in the slice", lambda: node.devices()["card-simcard1"]["bitstream"] == "full")
