"""``fpga-agent run --mode dra`` as a whole: the agent with API access from a kubeconfig (the HTTP-level
fake API server, with ResourceSlices and ResourceClaims), the kubelet's DRA side (the stand-in) over real
unix sockets, and simulated cards.

The agent registers no device plugin; it serves the DRA driver, publishes one device per slot in the
node's ResourceSlice and keeps it current, prepares claims by programming their slots, and keeps
prepared claims across its own restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from agent._proto.drahealth.v1alpha1 import api_pb2 as health_pb
from agent._proto.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from agent.app import Agent, connect_kube
from agent.bitstreams.declaration import declaration_object
from agent.config import Config
from agent.demo.kubelet.dra import DraKubelet
from agent.dra.constants import DRIVER_NAME
from agent.dra.mode import UNHEALTHY_TAINT
from agent.dra.naming import disambiguated_name
from agent.dra.server import PluginSockets
from agent.errors import CatalogError, ConfigError
from agent.kube import resourceslices
from agent.node.reconfigure import ANNOTATION
from agent.simfpga.fabric import PLATFORM
from agent.slots import checkpoint
from agent.slots.model import SlotId
from tests.fakeapi import DEFAULT_NODE, FakeKubeApiServer, make_pod, make_resource_claim, running_apiserver
from tests.fakes import RESOURCE_NAME, KubeletStandIn, test_config
from tests.integration.bitstreams.servers import Registry
from tests.integration.reconfigure.support import (
    Bitstreams,
    fabric_log,
    push_artifact,
    slot,
    state,
    wait_registry,
)
from tests.integration.reconfigure.support import until as wait_until

WAIT_S = 10.0
SLICE = f"{DEFAULT_NODE}-{DRIVER_NAME}"
NS = "default"


@dataclasses.dataclass
class DraNode:
    api: FakeKubeApiServer
    config: Config
    kubelet: DraKubelet
    agent: Agent
    #: the kubelet's device-plugin side (registration and pod-resources), which DRA mode leaves alone
    device_plugins: CountingKubelet

    @property
    def sockets(self) -> PluginSockets:
        return PluginSockets(self.config.dra_registry_dir, self.config.dra_plugins_dir, DRIVER_NAME)

    def devices(self) -> dict[str, dict[str, Any]]:
        """The published slice's devices: name -> attribute values."""
        found = self.api.resource_slice(SLICE)
        assert found is not None
        return {
            d["name"]: {k: next(iter(v.values())) for k, v in d.get("attributes", {}).items()}
            for d in found["spec"]["devices"]
        }

    def claim(
        self, name: str, devices: list[str], parameters: dict[str, object] | None = None, *, request: str = "fpga"
    ) -> tuple[str, str, str]:
        """An allocated claim of ``devices`` in this node's pool for its request ``fpga`` (``fpga/cached`` or
        ``fpga/any``: the cache-aware claim's alternatives); returns (namespace, uid, name) for the kubelet."""
        pod = self.api.add_pod(f"{name}-pod", namespace=NS)
        body = make_resource_claim(
            name,
            namespace=NS,
            driver=DRIVER_NAME,
            devices=[(request, DEFAULT_NODE, d) for d in devices],
            parameters=parameters,
            first_available={"fpga": ["cached", "any"]} if "/" in request else None,
            reserved_for=[(pod["metadata"]["name"], pod["metadata"]["uid"])],
        )
        stored = self.api.put_resource_claim(body)
        return NS, stored["metadata"]["uid"], name


async def until(what: str, check: Callable[[], bool]) -> None:
    await wait_until(what, check, WAIT_S)


def config_for(root: Path, api: FakeKubeApiServer, **overrides: object) -> Config:
    return dataclasses.replace(
        test_config(root, node_name=DEFAULT_NODE, mode="dra"),
        kubeconfig=api.write_kubeconfig(root / "kubeconfig"),
        **overrides,  # type: ignore[arg-type]
    )


@contextlib.asynccontextmanager
async def agent_running(config: Config, bitstreams: Bitstreams) -> AsyncIterator[Agent]:
    config.dra_registry_dir.mkdir(parents=True, exist_ok=True)
    agent = Agent(config, catalog=bitstreams.catalog, kube=connect_kube(config))
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop), name="agent-under-test")
    try:
        yield agent
    finally:
        stop.set()
        async with asyncio.timeout(WAIT_S):
            await task


class CountingKubelet(KubeletStandIn):
    """The stand-in counting the pod-resources List and Get calls it answered."""

    pod_resources_reads = 0

    def read_assignments(self) -> dict[tuple[str, str], dict[str, dict[str, list[str]]]]:
        self.pod_resources_reads += 1
        return super().read_assignments()


@contextlib.asynccontextmanager
async def device_plugin_kubelet(config: Config) -> AsyncIterator[CountingKubelet]:
    """The kubelet's device-plugin registration and pod-resources sockets (a real kubelet serves them in any mode)."""
    kubelet = CountingKubelet(config.device_plugin_dir, config.pod_resources_socket)
    await kubelet.start()
    try:
        yield kubelet
    finally:
        await kubelet.stop()


@contextlib.asynccontextmanager
async def dra_node(sock_dir: Path, bitstreams: Bitstreams, **overrides: object) -> AsyncIterator[DraNode]:
    with running_apiserver() as api:
        api.add_node(DEFAULT_NODE)
        config = config_for(sock_dir, api, **overrides)
        async with device_plugin_kubelet(config) as device_plugins, agent_running(config, bitstreams) as agent:
            node = DraNode(api, config, DraKubelet(config.dra_registry_dir), agent, device_plugins)
            await registered(node.kubelet)
            yield node


async def registered(kubelet: DraKubelet) -> None:
    """The kubelet's plugin watcher finds the agent's registration socket and registers the driver."""
    await until("the registration socket", lambda: bool(kubelet.sockets()))
    await asyncio.to_thread(kubelet.register, kubelet.sockets()[0])


async def test_the_driver_is_registered_instead_of_a_device_plugin_and_every_slot_is_a_device(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    async with dra_node(sock_dir, bitstreams) as node:
        assert node.agent.readiness() is None
        assert node.kubelet.version == "v1.DRAPlugin"
        await until("the slice", lambda: node.api.resource_slice(SLICE) is not None)
        # No device plugin: nothing registered with the kubelet's device-plugin side, no socket of ours beside it.
        assert node.device_plugins.registrations == []
        assert [p.name for p in node.config.device_plugin_dir.iterdir()] == ["kubelet.sock"]
        assert (node.agent.servicer, node.agent.lifecycle) == (None, None)
        published = node.api.resource_slice(SLICE)
        assert published is not None
        assert published["spec"]["driver"] == DRIVER_NAME
        assert published["spec"]["nodeName"] == DEFAULT_NODE
        assert published["spec"]["pool"] == {"name": DEFAULT_NODE, "generation": 1, "resourceSliceCount": 1}
        (owner,) = published["metadata"]["ownerReferences"]  # deleted with its Node
        assert (owner["kind"], owner["name"]) == ("Node", DEFAULT_NODE)
        devices = node.devices()
        assert sorted(devices) == sorted(s.slot.id for s in node.agent.registry.snapshot())
        first = devices[slot(0, 0)]
        assert first["platform"] == state(node.agent.registry, slot(0, 0)).slot.platform
        assert first["bitstream"] == ""
        assert set(first) <= {"platform", "card", "numa", "bitstream"}  # what claims select on, no more
        assert taints(node) == {}


async def test_a_prepared_claim_programs_its_slot_and_the_slice_shows_the_bitstream(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    wanted = bitstreams.accel_a
    target = slot(1, 2)
    async with dra_node(sock_dir, bitstreams) as node:
        await until("the slice", lambda: node.api.resource_slice(SLICE) is not None)
        ref = node.claim("fpga", [target], {"bitstream": wanted.name})
        with fabric_log(node.agent.backend.fabric) as log:  # type: ignore[arg-type]
            answer = await asyncio.to_thread(node.kubelet.prepare, ref)
            assert [c.slot for c in log.programming()] == [target, target]
        result = answer.claims[ref[1]]
        assert result.error == ""
        (device,) = result.devices
        assert (device.pool_name, device.device_name) == (DEFAULT_NODE, target)
        assert list(device.cdi_device_ids) == [f"{DRIVER_NAME}/slot={ref[1]}-{target}"]
        spec = json.loads((node.config.cdi_dir / f"{DRIVER_NAME}-{ref[1]}.json").read_text())
        assert spec["devices"][0]["name"] == f"{ref[1]}-{target}"
        await until("the bitstream in the slice", lambda: node.devices()[target]["bitstream"] == wanted.name)
        assert state(node.agent.registry, target).accelerator_id == wanted.accelerator_id
        assert state(node.agent.registry, target).holder is not None

        with fabric_log(node.agent.backend.fabric) as log:  # type: ignore[arg-type]
            again = await asyncio.to_thread(node.kubelet.prepare, ref)  # the kubelet asks again: nothing is done
            assert log.programming() == []
        assert again.claims[ref[1]].error == ""

        released = await asyncio.to_thread(node.kubelet.unprepare, ref)
        assert released.claims[ref[1]].error == ""
        assert not (node.config.cdi_dir / f"{DRIVER_NAME}-{ref[1]}.json").exists()
        assert state(node.agent.registry, target).holder is None
        assert state(node.agent.registry, target).bitstream == wanted.name  # the content stays: the cache


async def test_a_claim_allocated_through_its_fallback_alternative_is_prepared_for_its_request(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    """The cache-aware claim (firstAvailable cached, any): the config names the request, the result the
    subrequest used; the kubelet is answered with the request."""
    target = slot(0, 2)
    async with dra_node(sock_dir, bitstreams) as node:
        ref = node.claim("fpga", [target], {"bitstream": bitstreams.accel_c.name}, request="fpga/any")
        answer = await asyncio.to_thread(node.kubelet.prepare, ref)
        assert answer.claims[ref[1]].error == ""
        (device,) = answer.claims[ref[1]].devices
        assert (device.device_name, list(device.request_names)) == (target, ["fpga"])
        assert state(node.agent.registry, target).bitstream == bitstreams.accel_c.name


async def test_a_claim_with_a_bad_bitstream_fails_prepare_with_its_name_and_changes_nothing(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    async with dra_node(sock_dir, bitstreams) as node:
        await until("the slice", lambda: node.api.resource_slice(SLICE) is not None)
        before = node.devices()
        ref = node.claim("fpga", [slot(0, 1)], {"bitstream": "no-such-bitstream"})
        answer = await asyncio.to_thread(node.kubelet.prepare, ref)
        assert "no-such-bitstream" in answer.claims[ref[1]].error
        assert state(node.agent.registry, slot(0, 1)).holder is None
        assert list(node.config.cdi_dir.glob("*.json")) == []
        # A later change the publisher must show: once it is in the slice, so would be anything the bad one did.
        good, wanted = slot(1, 1), bitstreams.accel_a.name
        later = node.claim("later", [good], {"bitstream": wanted})
        assert (await asyncio.to_thread(node.kubelet.prepare, later)).claims[later[1]].error == ""
        await until("the later change in the slice", lambda: node.devices()[good]["bitstream"] == wanted)
        after = node.devices()
        assert {name: d for name, d in after.items() if name != good} == {
            name: d for name, d in before.items() if name != good
        }


async def test_two_slots_whose_ids_differ_only_in_a_dot_are_two_devices_each_prepared_on_its_own_slot(
    sock_dir: Path, bitstreams: Bitstreams, caplog: pytest.LogCaptureFixture
) -> None:
    kept = slot(0, 0)
    twin = SlotId(kept.replace("-", ".", 1))  # "simcard0.slot0": the same DNS label as "simcard0-slot0"
    twin_device = disambiguated_name(twin)
    async with dra_node(sock_dir, bitstreams) as node:
        await until("the slice", lambda: node.api.resource_slice(SLICE) is not None)
        registry = node.agent.registry
        registry.upsert(dataclasses.replace(state(registry, kept).slot, id=twin))  # a card discovery reports
        await until("the twin in the slice", lambda: twin_device in node.devices())
        assert kept in node.devices()
        assert len(node.devices()) == len(registry.snapshot())
        (warning,) = [r for r in caplog.records if "same DRA device name" in r.getMessage()]
        assert f"slot {twin} is device {twin_device}" in warning.getMessage()
        # Each name is prepared on its own slot (the twin only in the registry: handed over as it is).
        ref = node.claim("fpga", [twin_device])
        assert (await asyncio.to_thread(node.kubelet.prepare, ref)).claims[ref[1]].error == ""
        assert state(registry, twin).holder is not None
        assert state(registry, kept).holder is None
        other = node.claim("other", [kept], {"bitstream": bitstreams.accel_b.name})
        assert (await asyncio.to_thread(node.kubelet.prepare, other)).claims[other[1]].error == ""
        assert state(registry, kept).bitstream == bitstreams.accel_b.name
        assert state(registry, kept).holder is not None


async def test_a_deleted_slice_is_back_as_soon_as_the_kubelet_registers_the_driver_again(
    sock_dir: Path, bitstreams: Bitstreams, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resourceslices, "CHECK_INTERVAL_S", 3600.0)  # no periodic check: only the registration
    async with dra_node(sock_dir, bitstreams) as node:
        await until("the slice", lambda: node.api.resource_slice(SLICE) is not None)
        node.api.delete_resource_slice(SLICE)  # a starting kubelet deletes the node's slices...
        await asyncio.to_thread(node.kubelet.register, node.kubelet.sockets()[0])  # ...and registers the driver
        await until("the slice again", lambda: node.api.resource_slice(SLICE) is not None)
        assert sorted(node.devices()) == sorted(s.slot.id for s in node.agent.registry.snapshot())


@contextlib.asynccontextmanager
async def stopped_after_a_prepare(
    sock_dir: Path, bitstreams: Bitstreams, target: str, bitstream: str
) -> AsyncIterator[tuple[DraNode, tuple[str, str, str]]]:
    """An agent that prepared a claim of ``target`` and stopped (``node.agent``); the API server and both sides
    of the kubelet still run for the next agent. Yields the node and the kubelet's reference to the claim."""
    with running_apiserver() as api:
        api.add_node(DEFAULT_NODE)
        config = config_for(sock_dir, api)
        async with device_plugin_kubelet(config) as device_plugins:  # pod-resources lists no device
            async with agent_running(config, bitstreams) as agent:
                node = DraNode(api, config, DraKubelet(config.dra_registry_dir), agent, device_plugins)
                await registered(node.kubelet)
                ref = node.claim("fpga", [target], {"bitstream": bitstream})
                assert (await asyncio.to_thread(node.kubelet.prepare, ref)).claims[ref[1]].error == ""
            yield node, ref
            # pod-resources lists no DRA claim as a device: asked, it would have freed the claim's slot
            assert device_plugins.pod_resources_reads == 0


async def test_an_agent_restart_keeps_the_prepared_claims_slots_held(sock_dir: Path, bitstreams: Bitstreams) -> None:
    target = slot(0, 3)
    async with stopped_after_a_prepare(sock_dir, bitstreams, target, bitstreams.accel_b.name) as (node, ref):
        kubelet = node.kubelet
        async with agent_running(node.config, bitstreams) as restarted:
            await registered(kubelet)
            await wait_registry(restarted.registry, lambda: state(restarted.registry, target).holder is not None)
            assert state(restarted.registry, target).bitstream == bitstreams.accel_b.name
            with fabric_log(restarted.backend.fabric) as log:  # type: ignore[arg-type]
                assert (await asyncio.to_thread(kubelet.prepare, ref)).claims[ref[1]].error == ""
                assert log.programming() == []
            assert (await asyncio.to_thread(kubelet.unprepare, ref)).claims[ref[1]].error == ""
            assert state(restarted.registry, target).holder is None


async def test_at_start_the_prepared_claims_hold_the_slots_whatever_the_slot_checkpoint_says(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    """Stopped between writing the claim record and the slot checkpoint, the agent comes back from both."""
    target, stale = slot(1, 3), slot(0, 0)
    async with stopped_after_a_prepare(sock_dir, bitstreams, target, bitstreams.accel_a.name) as (node, _):
        rewrite_slot_checkpoint(node.agent, release=[target], hold=[stale])
        async with agent_running(node.config, bitstreams) as restarted:
            await registered(node.kubelet)
            holder = state(restarted.registry, target).holder
            assert holder is not None
            assert (holder.namespace, holder.pod, holder.container) == (NS, "fpga-pod", "claim/fpga")
            assert state(restarted.registry, stale).holder is None


def rewrite_slot_checkpoint(stopped: Agent, *, release: list[str], hold: list[str]) -> None:
    """The stopped agent's slot checkpoint with ``release`` free and ``hold`` held by a device-plugin container."""
    stopped.registry.release([SlotId(s) for s in release])
    stopped.registry.set_holder([SlotId(s) for s in hold], NS, "web", "main")
    stopped.checkpoint_file.path.write_bytes(checkpoint.encode(stopped.registry.snapshot()))


async def test_a_claims_bitstream_that_only_the_cluster_declares_is_pulled_at_prepare(
    sock_dir: Path, bitstreams: Bitstreams, registry: Registry, session: aiohttp.ClientSession
) -> None:
    target = slot(1, 1)
    source = sock_dir / "claimed.bin"
    source.write_bytes(b"a bitstream only a registry holds\n" * 2048)
    declaration = await push_artifact(session, registry, source, "claimed", PLATFORM)
    async with dra_node(sock_dir, bitstreams, bitstream_plain_http=(registry.address,)) as node:
        node.api.put_fpga_bitstream(declaration_object(declaration))
        await until("the slice", lambda: node.api.resource_slice(SLICE) is not None)
        await until(
            "the declaration at the agent",
            lambda: (
                node.agent.distribution is not None
                and node.agent.distribution.puller is not None
                and node.agent.distribution.puller.declared("claimed") is not None
            ),
        )
        with pytest.raises(CatalogError):
            bitstreams.catalog.resolve("claimed")
        ref = node.claim("fpga", [target], {"bitstream": "claimed"})
        answer = await asyncio.to_thread(node.kubelet.prepare, ref)
        assert answer.claims[ref[1]].error == ""
        assert state(node.agent.registry, target).bitstream == "claimed"
        assert state(node.agent.registry, target).accelerator_id == "accel-claimed"
        assert bitstreams.catalog.resolve("claimed").source == declaration.source
        await until(
            "the Events",
            lambda: (
                [e["reason"] for e in node.api.events() if e["involvedObject"]["name"] == "fpga-pod"]
                == ["FpgaBitstreamPulled", "FpgaSlotProgrammed"]
            ),
        )


def test_dra_mode_without_api_access_is_refused_naming_the_flag(sock_dir: Path, bitstreams: Bitstreams) -> None:
    config = test_config(sock_dir, mode="dra")

    async def build() -> None:
        Agent(config, catalog=bitstreams.catalog, kube=None)

    with pytest.raises(ConfigError, match=r"^--mode dra: .*needs API access"):
        asyncio.run(build())


async def test_releasing_a_claim_whose_card_was_unplugged_succeeds_and_the_slot_leaves_the_slice(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    target = slot(1, 0)
    async with dra_node(sock_dir, bitstreams) as node:
        await until("the slice", lambda: node.api.resource_slice(SLICE) is not None)
        ref = node.claim("fpga", [target], {"bitstream": bitstreams.accel_a.name})
        assert (await asyncio.to_thread(node.kubelet.prepare, ref)).claims[ref[1]].error == ""
        fabric = node.agent.backend.fabric
        assert fabric is not None
        card = state(node.agent.registry, target).slot.card
        fabric.unplug(card)
        await wait_registry(node.agent.registry, lambda: not state(node.agent.registry, target).present)
        await until("the slot tainted in the slice", lambda: target in taints(node))
        released = await asyncio.to_thread(node.kubelet.unprepare, ref)  # the pod is being deleted: never blocked
        assert released.claims[ref[1]].error == ""
        assert node.agent.registry.get(target) is None  # held no more and gone: it leaves the list...
        await until("the slot out of the slice", lambda: target not in node.devices())  # ...and the slice


async def test_a_slot_going_unhealthy_reaches_the_kubelets_health_stream_and_the_slice(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    target = slot(0, 2)
    async with dra_node(sock_dir, bitstreams) as node:
        await until("the slice", lambda: node.api.resource_slice(SLICE) is not None)
        fabric = node.agent.backend.fabric
        assert fabric is not None
        card = state(node.agent.registry, target).slot.card
        region = state(node.agent.registry, target).slot.region
        with grpc.insecure_channel(f"unix://{node.sockets.dra}") as channel:
            stream = health_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
                health_pb.NodeWatchResourcesRequest(), timeout=WAIT_S
            )
            first = await asyncio.to_thread(next, stream)
            assert {d.device.device_name: d.health for d in first.devices} == {
                s.slot.id: health_pb.HEALTHY for s in node.agent.registry.snapshot()
            }
            fabric.set_health(card, region, False, "port error")
            changed = await asyncio.to_thread(next, stream)
            health = {d.device.device_name: (d.health, d.message) for d in changed.devices}
            assert health[target] == (health_pb.UNHEALTHY, "port error")
            stream.cancel()
        await until("the slot tainted in the slice", lambda: target in taints(node))
        assert taints(node) == {target: [{"key": UNHEALTHY_TAINT, "effect": "NoSchedule"}]}
        fabric.set_health(card, region, True, "")
        await until("the taint gone again", lambda: taints(node) == {})


def taints(node: DraNode) -> dict[str, Any]:
    """The taints of the devices in the published slice, by device (devices without any left out)."""
    found = node.api.resource_slice(SLICE)
    assert found is not None
    return {d["name"]: d["taints"] for d in found["spec"]["devices"] if d.get("taints")}


async def test_a_huge_claim_name_with_newlines_is_quoted_and_cut_in_answers_and_logs(
    sock_dir: Path, bitstreams: Bitstreams, caplog: pytest.LogCaptureFixture
) -> None:
    hostile = ("x\ninjected line " * 4096)[: 64 * 1024]
    async with dra_node(sock_dir, bitstreams) as node:
        caplog.clear()
        with caplog.at_level(logging.INFO):
            uid = "0b7b3a55-0c1d-4f0e-9a43-7d5be6b0c001"
            prepared = await asyncio.to_thread(node.kubelet.prepare, (hostile, uid, hostile))
            released = await asyncio.to_thread(node.kubelet.unprepare, (hostile, uid, hostile))
        error = prepared.claims[uid].error
        assert error
        assert "\n" not in error
        assert len(error) < 1024, len(error)
        assert released.claims[uid].error == ""
        text = "\n".join(record.getMessage() for record in caplog.records)
        assert "injected line" in text  # the name is shown, quoted ...
        assert "\ninjected line" not in text  # ... never as a line of its own
        assert max(len(record.getMessage()) for record in caplog.records) < 2048


async def test_a_claim_the_scheduler_made_for_a_device_plugin_pod_takes_each_containers_bitstream(
    sock_dir: Path, bitstreams: Bitstreams
) -> None:
    """DRAExtendedResource: a pod asks for example.com/fpga-slot on a DRA node; the scheduler makes a claim with one
    request per container (no config), reserved for the pod, whose status maps requests to containers."""
    async with dra_node(sock_dir, bitstreams) as node:
        pod = make_pod(
            "dp-style",
            namespace=NS,
            slots={"a": 1, "b": 1},
            annotations={ANNOTATION: bitstreams.accel_a.name, f"{ANNOTATION}.b": bitstreams.accel_b.name},
        )
        claim_name = "dp-style-extended-resources-8x2kq"
        pod["status"]["extendedResourceClaimStatus"] = {
            "resourceClaimName": claim_name,
            "requestMappings": [
                {"containerName": c, "resourceName": RESOURCE_NAME, "requestName": f"container-{i}-request-0"}
                for i, c in enumerate(("a", "b"))
            ],
        }
        stored = node.api.put_pod(pod)
        body = make_resource_claim(
            claim_name,
            namespace=NS,
            driver=DRIVER_NAME,
            devices=[
                ("container-0-request-0", DEFAULT_NODE, slot(0, 0)),
                ("container-1-request-0", DEFAULT_NODE, slot(0, 1)),
            ],
            reserved_for=[("dp-style", stored["metadata"]["uid"])],
        )
        ref = (NS, node.api.put_resource_claim(body)["metadata"]["uid"], claim_name)
        kube = node.agent.kube
        assert kube is not None
        await until("the pod in the agent's cache", lambda: kube.pods.get(NS, "dp-style") is not None)
        answer = await asyncio.to_thread(node.kubelet.prepare, ref)
        assert answer.claims[ref[1]].error == ""
        assert state(node.agent.registry, slot(0, 0)).bitstream == bitstreams.accel_a.name
        assert state(node.agent.registry, slot(0, 1)).bitstream == bitstreams.accel_b.name
        assert [list(d.cdi_device_ids) for d in answer.claims[ref[1]].devices] == [
            [f"{DRIVER_NAME}/slot={ref[1]}-{slot(0, 0)}"],
            [f"{DRIVER_NAME}/slot={ref[1]}-{slot(0, 1)}"],
        ]
