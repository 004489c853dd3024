"""Wiring: build the backend, the slot registry and the device plugin (or the DRA plugin), and run them.

The only module (with ``cli`` and ``demo``) that knows every adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.config import Config
from agent.deviceplugin.constants import POD_RESOURCES_TIMEOUT_S, RESOURCE_NAME
from agent.deviceplugin.lifecycle import PluginLifecycle
from agent.deviceplugin.podresources import PodResourcesClient
from agent.deviceplugin.servicer import DevicePluginServicer
from agent.errors import ConfigError, FpgaSlotError, KubeError, KubeletError
from agent.files.atomic import remove_stale_temp_files
from agent.kube.client import connect_api
from agent.kube.events import EventRecorder
from agent.kube.nodes import NodePublisher
from agent.kube.pods import PodCache, PodInfo
from agent.kube.uninstall import node_with_state, release_account, successor_expected
from agent.node.backend import Backend, build_backend, log_enumeration
from agent.node.distribution import Distribution
from agent.node.health import HealthServer, PortInUse
from agent.node.metrics import AgentMetrics, RpcTimer, metrics_route
from agent.node.nodestate import CatalogReader, publish_node_state
from agent.node.pods import EventSink, PodDirectory
from agent.node.reconfigure import Reconfigurer
from agent.programming.catalog import Catalog
from agent.slots import checkpoint
from agent.slots.model import Slot
from agent.slots.registry import SlotRegistry

if TYPE_CHECKING:
    from agent.dra.mode import DraMode

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KubeAccess:
    """The API server as the agent uses it: this node's pods, Events on them, the slot state on the Node."""

    api_client: Any  # kubernetes.client.ApiClient (untyped library)
    pods: PodCache
    events: EventRecorder
    nodes: NodePublisher


def connect_kube(config: Config) -> KubeAccess | None:
    """API access from the kubeconfig found as kubectl finds it, or the service account; None (said once) without it."""
    try:
        api_client = connect_api(config.kubeconfig)
    except KubeError as exc:
        logger.warning(
            "no API server access (%s): pod annotations cannot be read, so slots are handed over "
            "as they are and nothing is programmed; no Events are posted and no slot state is published",
            exc,
        )
        return None
    return KubeAccess(
        api_client,
        PodCache(api_client, config.node_name),
        EventRecorder(api_client, config.node_name),
        NodePublisher(api_client, config.node_name, namespace=config.namespace, pod_name=config.pod_name),
    )


class Agent:
    """The node agent: discovery feeding the registry, the device plugin (or in DRA mode the DRA driver) serving it."""

    def __init__(
        self,
        config: Config,
        backend: Backend | None = None,
        *,
        catalog: Catalog | None = None,
        pods: PodDirectory | None = None,
        events: EventSink | None = None,
        kube: KubeAccess | None = None,
    ) -> None:
        """``kube`` (the real API access) or ``pods``/``events`` (stand-ins) feed reconfiguration."""
        self.config = config
        self.kube = kube
        self.catalog = catalog
        #: reads the catalog for the node state; its read at start also seeds the pulled files' eviction order
        self.catalog_reader = CatalogReader(catalog)
        if kube is not None:
            pods, events = kube.pods, kube.events
        self.backend = backend or build_backend(config)
        self.registry = SlotRegistry()
        self.metrics = AgentMetrics()
        self.pod_resources = PodResourcesClient(config.pod_resources_socket, RESOURCE_NAME, POD_RESOURCES_TIMEOUT_S)
        self.reconfigurer = Reconfigurer(
            self.registry,
            self.pod_resources,
            pods=pods,
            catalog=catalog,
            programmers=self.backend.programmers,
            read_hardware=self._read_hardware,
            events=events,
            timeout_s=config.program_timeout_s,
            metrics=self.metrics,
            before_programming=self._checkpoint_before_programming,
        )
        #: Bitstreams the cluster declares (FpgaBitstream objects), pulled into the catalog; needs API access
        self.distribution: Distribution | None = None
        if kube is not None and catalog is not None:
            self.distribution = Distribution(
                config,
                catalog=catalog,
                api_client=kube.api_client,
                registry=self.registry,
                pods=pods,
                events=events,
                metrics=self.metrics,
                loading=self.reconfigurer.loading,
            )
            self.reconfigurer.fetch_bitstream = self.distribution.fetch
            self.reconfigurer.declared_accelerator = self.distribution.declared_accelerator
        #: The device plugin (``--mode device-plugin``): its RPCs and its socket; None in DRA mode
        self.servicer: DevicePluginServicer | None = None
        self.lifecycle: PluginLifecycle | None = None
        #: DRA mode (``--mode dra``): slots go to ResourceClaims; no device plugin is built or registered
        self.dra: DraMode | None = None
        if config.mode == "dra":
            self.dra = self._dra_mode(pods)
        else:
            self.servicer = DevicePluginServicer(self.registry, self.reconfigurer, config.cdi)
            self.lifecycle = PluginLifecycle(
                config.device_plugin_dir, self.servicer, interceptors=[RpcTimer(self.metrics)]
            )
        self.metrics.watch_slots(self.registry, lambda: 0 if self.lifecycle is None else self.lifecycle.registrations)
        self.checkpoint_file = checkpoint.CheckpointFile(config.state_dir / checkpoint.FILE_NAME)
        self._tasks: list[asyncio.Task[None]] = []
        #: the probes' endpoint; more routes (``add_routes``) may join it before ``run``
        self.health: HealthServer | None = None
        if config.health_listen is not None:
            self.health = HealthServer(
                config.health_listen, alive=self.liveness, ready=self.readiness, shared=config.mode == "dra"
            )
            self.health.add_routes([metrics_route(self.metrics.registry)])

    def _dra_mode(self, pods: PodDirectory | None) -> DraMode:
        # the DRA driver's code and protocols are loaded in DRA mode only (a device-plugin agent's memory)
        from agent.dra.binding import ClaimStatusAccess
        from agent.dra.constants import DRIVER_NAME, KUBELET_CALL_TIMEOUT_S
        from agent.dra.mode import DraMode
        from agent.dra.server import PluginSockets
        from agent.kube.claims import ClaimReader, ClaimStatusWriter
        from agent.kube.client import REQUEST_TIMEOUT_S as CLAIM_READ_TIMEOUT_S
        from agent.kube.reflector import Watcher
        from agent.kube.resourceslices import ResourceSlicePublisher

        if self.kube is None:
            raise ConfigError(
                "--mode dra: the agent reads ResourceClaims and publishes ResourceSlices, which needs API access "
                "(--kubeconfig, or the pod's service account)"
            )
        config, api_client, catalog = self.config, self.kube.api_client, self.catalog
        slices = ResourceSlicePublisher(api_client, DRIVER_NAME, config.node_name)
        slices.standby = self._superseded

        def sha256_of(name: str) -> str:
            try:
                return catalog.resolve(name).sha256 if catalog is not None else ""
            except FpgaSlotError:
                return ""

        status = ClaimStatusAccess(
            prepare_writer=ClaimStatusWriter(api_client, DRIVER_NAME, f"{DRIVER_NAME}/prepare"),
            binding_writer=ClaimStatusWriter(api_client, DRIVER_NAME, f"{DRIVER_NAME}/binding"),
            watch=lambda **callbacks: Watcher(api_client, "resourceclaims", **callbacks),
            sha256_of=sha256_of,
            events=self.kube.events,
            binding_conditions=config.binding_conditions,
        )
        dra = DraMode(
            node=config.node_name,
            registry=self.registry,
            reconfigurer=self.reconfigurer,
            pods=pods,
            claims=ClaimReader(api_client, DRIVER_NAME),
            slices=slices,
            sockets=PluginSockets(config.dra_registry_dir, config.dra_plugins_dir, DRIVER_NAME, config.pod_uid),
            cdi_dir=config.cdi_dir,
            state_dir=config.state_dir,
            # The kubelet gives the whole call 45 s; reading the claim comes first.
            timeout_s=min(config.program_timeout_s, KUBELET_CALL_TIMEOUT_S - CLAIM_READ_TIMEOUT_S),
            status=status,
            whole_cards=config.whole_cards,
        )
        # An update's new pod publishes the node's state and the slice, not both: the node's state waits while not
        # yet registered (during an update the old pod still publishes) or once superseded.
        self.kube.nodes.standby = lambda: not dra.server.placed or dra.server.superseded()
        return dra

    def _superseded(self) -> bool:
        """Whether another agent serves the device-plugin socket, or registered the DRA driver after us (a rolling
        update): it owns the checkpoint."""
        if self.dra is not None:
            return self.dra.server.superseded()
        return self.lifecycle is not None and self.lifecycle.superseded

    async def _read_hardware(self) -> Sequence[Slot]:
        return (await self.backend.source.enumerate()).slots

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set; the socket is removed on the way out. The health endpoint answers throughout
        (in DRA mode, where an update's new pod starts beside the old one, once its port is free)."""
        binding: asyncio.Task[None] | None = None
        if self.health is not None:
            try:
                await self.health.start()
            except PortInUse:
                if self.dra is None:
                    raise
                binding = asyncio.create_task(self.health.start_when_free(), name="health-endpoint")
        try:
            await self._run(stop)
        finally:
            if binding is not None:
                binding.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await binding
            if self.health is not None:
                await self.health.stop()

    def liveness(self) -> str | None:
        """None while every long-lived task runs; else which ended (``/healthz``)."""
        ended = [task.get_name() for task in self._tasks if task.done()]
        return f"tasks ended: {', '.join(ended)}" if ended else None

    def readiness(self) -> str | None:
        """None while registered with the kubelet (``/readyz``): the device plugin, or in DRA mode the driver."""
        if self.dra is not None:
            from agent.dra.constants import DRIVER_NAME

            return None if self.dra.registered() else f"the kubelet has not registered DRA driver {DRIVER_NAME}"
        assert self.lifecycle is not None  # device-plugin mode
        return None if self.lifecycle.registered.is_set() else "not registered with the kubelet"

    async def _run(self, stop: asyncio.Event) -> None:
        source = self.backend.source
        enumeration = await source.enumerate()
        if self.backend.commands is not None:  # what the vendor tools read back is what the slots report from now on
            await self.backend.commands.read_back_all(enumeration.slots)
            enumeration = await source.enumerate()
        log_enumeration(source, enumeration)
        self.registry.replace_all(enumeration.slots)
        await asyncio.to_thread(remove_stale_temp_files, self.checkpoint_file.path)
        checkpoint.restore_into(self.registry, await asyncio.to_thread(checkpoint.load, self.checkpoint_file.path))
        if self.dra is None:  # device plugin: pod-resources says who holds a slot (in DRA mode, the claims)
            try:
                await self.reconfigurer.reconcile()
            except KubeletError as exc:
                logger.warning("holders not checked against the kubelet at start: %s", exc)
        # The catalog as the agent starts, read once for what needs it (both need API access).
        entries = await self.catalog_reader.read() if self.kube is not None else []
        try:
            jobs: dict[str, Coroutine[Any, Any, None]] = {
                "discovery": source.watch(self.registry),
                "checkpoint": checkpoint.keep_checkpoint(
                    self.checkpoint_file, self.registry, owned=lambda: not self._superseded()
                ),
            }
            if self.dra is None:
                jobs["reconcile"] = self.reconfigurer.run_reconcile()
            if self.distribution is not None:
                jobs["bitstreams"] = self.distribution.run(entries)
            if self.kube is not None:
                self.kube.pods.add_listener(self._on_pod_change)
                jobs["pod-cache"] = self.kube.pods.run()
                jobs["events"] = self.kube.events.run()
                jobs["node-publisher"] = self.kube.nodes.run()
                jobs["node-state"] = publish_node_state(
                    self.config.node_name, self.registry, self.catalog, self.kube.nodes, reader=self.catalog_reader
                )
            if self.dra is not None:
                plugin, plugin_name = self.dra.run(stop), "dra-plugin"
            else:
                assert self.lifecycle is not None  # device-plugin mode
                plugin, plugin_name = self.lifecycle.run(stop), "device-plugin"
            async with asyncio.TaskGroup() as group:
                background = [group.create_task(job, name=name) for name, job in jobs.items()]
                self._tasks = [*background, group.create_task(self._serve(plugin, background), name=plugin_name)]
            if self.kube is not None:
                await self._leave_node(self.kube)
        finally:
            await self.reconfigurer.loader.close()
            if self.backend.commands is not None:
                await self.backend.commands.close()
            await self.pod_resources.close()
            if self.kube is not None:
                await asyncio.to_thread(self.kube.api_client.close)
        logger.info("agent stopped")

    async def _leave_node(self, kube: KubeAccess) -> None:
        """After a clean stop: remove the node's slot state and labels when no agent pod follows on this node."""
        node = self.config.node_name
        if self._superseded():
            logger.info("slot state left on node %s: a newer agent serves it", node)
            return
        try:
            follows, why = await asyncio.to_thread(
                successor_expected, kube.api_client, self.config.namespace, self.config.pod_name, kube.nodes.daemonset
            )
        except KubeError as exc:
            logger.warning(
                "slot state left on node %s (fpga-agent uninstall removes its platform labels; the garbage "
                "collector removes its FpgaNodeState with the DaemonSet): %s",
                node,
                exc,
            )
            return
        if follows:
            logger.info("slot state left on node %s for the next agent: %s", node, why)
            return
        logger.info("no agent follows on node %s (%s): removing its slot state", node, why)
        if not (await kube.nodes.clear() and self.config.pod_name):
            return
        # An uninstall cleared this Node: release the account's finalizer when no Node has slot state left.
        namespace = self.config.namespace
        try:
            left = await asyncio.to_thread(node_with_state, kube.api_client)
            if left is not None:
                logger.info(
                    "node %s still has slot state: the service account's finalizer stays for the agent that clears "
                    "the last node (or fpga-agent uninstall)",
                    left,
                )
                return
            released = await asyncio.to_thread(release_account, kube.api_client, namespace)
        except KubeError as exc:
            logger.warning("uninstall not finished from here (fpga-agent uninstall finishes it): %s", exc)
            return
        if released:
            logger.info("no node has slot state left: released the service account of namespace %s", namespace)

    async def _checkpoint_before_programming(self) -> None:
        """The checkpoint says a programming is under way before the hardware is touched."""
        if self._superseded():
            return
        try:
            await self.checkpoint_file.write_now(self.registry)
        except OSError as exc:
            logger.error(
                "checkpoint %s could not record the programming under way (%s): programming anyway",
                self.checkpoint_file.path,
                exc,
            )

    def _on_pod_change(self, kind: str, pod: PodInfo) -> None:
        if kind == "DELETED" and self.dra is None:
            self.reconfigurer.request_reconcile()
        if self.distribution is not None:
            self.distribution.pod_changed(kind, pod)

    @staticmethod
    async def _serve(plugin: Coroutine[Any, Any, None], background: list[asyncio.Task[None]]) -> None:
        """Serve the kubelet (device plugin or DRA) until stopped; then the background tasks end."""
        try:
            await plugin
        finally:
            for task in background:
                task.cancel()
