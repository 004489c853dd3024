"""``fpga-agent demo dra``: the DRA mode on simulated slots, narrated.

The real agent in ``--mode dra`` against the kubelet's DRA side (:class:`agent.demo.kubelet.dra.DraKubelet`) and
the API server stand-in (:mod:`agent.demo.kubeapi`); the demo plays the scheduler."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from agent.app import Agent, connect_kube
from agent.config import Config
from agent.demo import ms_since, say
from agent.demo.deviceplugin import sim_setup
from agent.demo.draclaims import DEVICE_CLASS, NAMESPACE, CdiView, ClaimRun, PreparedClaim, SliceView, allocate, until
from agent.demo.kubeapi.server import KubeApiStandIn
from agent.demo.kubelet.dra import DraKubelet
from agent.dra.constants import DRIVER_NAME
from agent.simfpga.fabric import PLATFORM
from agent.simfpga.sample import SAMPLE_NAME

NODE = "demo-node"


async def run_dra_demo(base: Config) -> int:
    """Run the narrated DRA demo; returns the process exit code."""
    api = KubeApiStandIn().start()
    try:
        with tempfile.TemporaryDirectory(prefix="fpga-slot-dra-demo-") as tmp:
            root = Path(tmp)
            api.add_node(NODE)
            config, catalog = sim_setup(
                base,
                root,
                mode="dra",
                node_name=NODE,
                kubeconfig=api.write_kubeconfig(root / "kubeconfig"),
                dra_registry_dir=root / "plugins_registry",
                dra_plugins_dir=root / "plugins",
                cdi_dir=root / "cdi",
            )
            config.dra_registry_dir.mkdir(parents=True)
            agent = Agent(config, catalog=catalog, kube=connect_kube(config))
            stop = asyncio.Event()
            task = asyncio.create_task(agent.run(stop), name="agent")
            try:
                await _narrate(config, api, agent, stop, task)
            finally:
                stop.set()
                await task
    finally:
        await asyncio.to_thread(api.stop)
    say("done")
    return 0


async def _narrate(
    config: Config, api: KubeApiStandIn, agent: Agent, stop: asyncio.Event, task: asyncio.Task[None]
) -> None:
    say(f"1. Start the agent in DRA mode on simulated slots: it registers as DRA driver {DRIVER_NAME}")
    shape = f"{config.sim_cards} cards x {config.sim_slots_per_card} slots"
    say("", f"{shape}; kubelet plugin registry {config.dra_registry_dir}; API server stand-in at {api.url}")
    started = time.monotonic()
    kubelet = DraKubelet(config.dra_registry_dir)
    await until("the registration socket", lambda: bool(kubelet.sockets()))
    info = await asyncio.to_thread(kubelet.register, kubelet.sockets()[0])
    say("", f"the kubelet's plugin watcher found {kubelet.sockets()[0].name} after {ms_since(started)}")
    say("", f"GetInfo: type {info.type}, name {info.name}, versions {', '.join(info.supported_versions)}")
    say("", f"endpoint {info.endpoint}; the kubelet speaks {kubelet.version}")
    await until("the agent to be ready", lambda: agent.readiness() is None)
    say("", "the agent is ready (the kubelet registered the driver); no device plugin was registered")

    slices = SliceView(api, f"{NODE}-{DRIVER_NAME}")
    expected = config.sim_cards * config.sim_slots_per_card
    await until("the ResourceSlice", lambda: len(slices.devices()) == expected)
    say("2. Its ResourceSlice: one device per slot, with the attributes a claim selects on")
    say("", slices.summary())
    print(slices.table(), flush=True)

    claims = ClaimRun(api, kubelet, agent, NODE)
    cdi = CdiView(config.cdi_dir)
    say(f"3. A pod's claim asks for {SAMPLE_NAME}, cached first (daemonset/examples/dra/cached-first.yaml)")
    first = await _allocate_and_prepare(claims, slices, "aes-1")
    say("", f"NodePrepareResources returned after {first.took_ms:.1f} ms: CDI device {', '.join(first.cdi_ids)}")
    for line in cdi.describe(first.uid):
        say("", line)
    await _show_events(api, "aes-1-pod")
    await until("the bitstream in the slice", lambda: slices.attribute(first.device, "bitstream") == SAMPLE_NAME)
    say("", f"the slice now shows {first.device} with bitstream={SAMPLE_NAME}")

    say("4. The pod ends: NodeUnprepareResources releases the slot; the bitstream stays loaded (the cache)")
    released = await claims.unprepare(first)
    say("", f"claim {NAMESPACE}/aes-1 released{': ' + released if released else ''}")
    say("", f"CDI spec exists: {cdi.exists(first.uid)}; slot {first.device} held by {claims.holder(first.device)}")
    say("", f"slot {first.device} still holds {claims.loaded(first.device)}")

    say(f"5. A second pod's claim for {SAMPLE_NAME}: the slot that holds it is allocated, nothing is programmed")
    second = await _allocate_and_prepare(claims, slices, "aes-2")
    say("", f"NodePrepareResources returned after {second.took_ms:.1f} ms: CDI device {', '.join(second.cdi_ids)}")
    await _show_events(api, "aes-2-pod")

    say("6. A claim for a bitstream the node does not have is refused clearly and changes nothing")
    device, subrequest = allocate(slices.devices(), "aes-v9", taken=claims.allocated)
    typo = await claims.prepare("typo", device, subrequest, "aes-v9")
    say("", f"claim {NAMESPACE}/typo on {typo.device}: NodePrepareResources error: {typo.error}")
    say(
        "",
        f"slot {typo.device} held by {claims.holder(typo.device)}, holds {claims.loaded(typo.device)}; "
        f"CDI spec exists: {cdi.exists(typo.uid)}",
    )
    await _show_events(api, "typo-pod")

    say("7. The second pod ends: NodeUnprepareResources, and the slot is free again")
    released = await claims.unprepare(second)
    say("", f"claim {NAMESPACE}/aes-2 released{': ' + released if released else ''}")
    say("", f"slot {second.device} held by {claims.holder(second.device)}, holds {claims.loaded(second.device)}")

    fabric = agent.backend.fabric
    if fabric is not None:
        victim = list(slices.devices())[-1]
        slot = next(s.slot for s in agent.registry.snapshot() if s.slot.id == victim)
        say("8. A slot fails and recovers: the slice follows its health")
        failed = time.monotonic()
        fabric.set_health(slot.card, slot.region, healthy=False, reason="demo: configuration CRC error")
        await until("the unhealthy slot in the slice", lambda: bool(slices.taints(victim)))
        say("", f"{victim}: tainted {', '.join(slices.taints(victim))} in the slice after {ms_since(failed)}")
        say("", "no claim is allocated a tainted device (the taint is the slot's health; no attribute says it)")
        recovered = time.monotonic()
        fabric.set_health(slot.card, slot.region, healthy=True)
        await until("the recovered slot in the slice", lambda: not slices.taints(victim))
        say("", f"{victim}: untainted after {ms_since(recovered)}, allocatable again")

    say("9. SIGTERM: the driver stops serving and removes its sockets")
    stop.set()
    await task
    say("", f"registration socket exists: {bool(kubelet.sockets())}; endpoint exists: {_exists(info.endpoint)}")


def _exists(path: str) -> bool:
    return Path(path).exists()


async def _allocate_and_prepare(claims: ClaimRun, slices: SliceView, name: str) -> PreparedClaim:
    device, subrequest = allocate(slices.devices(), SAMPLE_NAME, taken=claims.allocated)
    say(
        "",
        f"the allocator tries fpga/cached (bitstream == {SAMPLE_NAME!r}), then fpga/any (platform == {PLATFORM!r}), "
        f"each of class {DEVICE_CLASS} with the driver checked first",
    )
    say("", f"claim {NAMESPACE}/{name} allocated {device} through fpga/{subrequest}")
    prepared = await claims.prepare(name, device, subrequest, SAMPLE_NAME)
    if prepared.error:
        raise RuntimeError(f"demo: claim {name} was not prepared: {prepared.error}")
    return prepared


async def _show_events(api: KubeApiStandIn, pod: str) -> None:
    """The Events the agent posted on ``pod`` (posted in the background: wait for the first)."""

    def posted() -> list[dict[str, object]]:
        return [e for e in api.events(NAMESPACE) if e["involvedObject"]["name"] == pod]

    await until(f"an Event on pod {pod}", lambda: bool(posted()))
    for event in posted():
        say("", f"event on {NAMESPACE}/{pod}: {event['type']} {event['reason']}: {event['message']}")
