"""The DRA plugin protocol against the real kubelet and scheduler (v1.36) of the node under test.

Our plugin server (``agent.dra``) runs in this process on the node's own kubelet paths,
so this module needs pytest to run on that node (as ``scripts/e2e`` does on the bundled
cluster); elsewhere it is skipped with the reason. A ResourceSlice offers one slot of
our driver, a DeviceClass selects the driver, and a pod with a ResourceClaim is
scheduled by the real scheduler's DRA allocator. The slice is published and, once
wiped, put back by ``agent.kube.resourceslices``. The real kubelet registers the plugin
through its plugin watcher, calls NodePrepareResources for the claim, hands the CDI
device we return to containerd, shows the health we stream in the pod's status, and
calls NodeUnprepareResources once the pod is gone.
What preparing does stands in here for the slot preparer (it writes the claim's CDI
spec with ``agent.dra.cdi``, a slot whose device node is the host's /dev/null): the
subject is the protocol and the CDI spec, end to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agent.config import load_config
from agent.dra.cdi import CdiSpecs
from agent.dra.constants import DRIVER_NAME
from agent.dra.health import DeviceHealth, HealthBoard
from agent.dra.server import DraPluginServer, PluginSockets
from agent.dra.service import ClaimRef, PreparedDevice
from agent.errors import KubeError
from agent.kube.claims import ClaimReader
from agent.kube.resourceslices import ResourceSlicePublisher, SliceDevice
from agent.slots.model import DeviceNode, Health, Slot, SlotId
from tests.e2e.cluster import Cluster, pick_node, wait_for

CDI_DIR = Path("/var/run/cdi")
DEFAULTS = load_config({}, env={})
SOCKETS = PluginSockets(DEFAULTS.dra_registry_dir, DEFAULTS.dra_plugins_dir)  # the node's kubelet paths
IMAGE = "busybox:1.35"
SHOW_SLOT = (
    "echo slots=$FPGA_SLOTS device=$FPGA_SLOT_0_DEVICE; test -c /dev/fpga-e2e-slot0 && echo char-device; sleep 3600"
)

pytestmark = pytest.mark.skipif(
    not SOCKETS.registry_dir.is_dir() or os.geteuid() != 0,
    reason="the DRA protocol test serves the plugin on the node's kubelet paths: run it as root on the node",
)


class CdiPreparer:
    """Prepares a claim by writing its CDI spec with ``agent.dra.cdi`` (one slot whose device node is the
    host's /dev/null), and releases it by removing the spec."""

    def __init__(self, pool: str) -> None:
        self.pool = pool
        self.specs = CdiSpecs(CDI_DIR)
        self.calls: list[tuple[str, str]] = []
        self.slot = Slot(
            id=SlotId("e2e-card0-port0"),
            card="e2e-card0",
            region="port0",
            numa=0,
            device_nodes=(DeviceNode("/dev/null", "/dev/fpga-e2e-slot0"),),
            platform="sim-pr-v1",
            loaded=None,
            health=Health.HEALTHY,
            backend="sim",
        )

    async def prepare(self, claim: ClaimRef) -> list[PreparedDevice]:
        self.calls.append(("prepare", claim.uid))
        (cdi_id,) = self.specs.write(claim.uid, [self.slot])
        return [PreparedDevice(self.pool, "slot-0", (cdi_id,), ("fpga",))]

    async def unprepare(self, claim: ClaimRef) -> None:
        self.calls.append(("unprepare", claim.uid))
        self.specs.remove(claim.uid)


@contextlib.contextmanager
def publishing(publisher: ResourceSlicePublisher) -> Iterator[None]:
    """The publisher's loop (``run``) on an event loop of its own, as the agent runs it."""
    done = threading.Event()

    async def keep() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(publisher.run(stop))
        await asyncio.to_thread(done.wait)
        stop.set()
        await task

    thread = threading.Thread(target=asyncio.run, args=(keep(),), daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(10)


def _gone(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _slot_health(pod: client.V1Pod) -> str | None:
    """The health the kubelet reports for the pod's claim device (``claim:fpga``), None before any."""
    for status in pod.status.container_statuses or []:
        for claim in status.allocated_resources_status or []:
            if claim.name == "claim:fpga":
                return next((r.health for r in claim.resources or []), None)
    return None


@pytest.fixture
def node(cluster: Cluster, pytestconfig: pytest.Config) -> str:
    return pick_node(cluster, pytestconfig.getoption("--e2e-node"))


class Served:
    """The plugin server on an event loop of its own thread, as the agent serves it on its loop."""

    def __init__(self, server: DraPluginServer, preparer: CdiPreparer, board: HealthBoard) -> None:
        self.server, self.preparer, self.board = server, preparer, board
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="dra-plugin", daemon=True)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(30)

    def set_health(self, devices: list[DeviceHealth]) -> None:
        self.loop.call_soon_threadsafe(self.board.set, devices)

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


@pytest.fixture
def plugin(node: str) -> Iterator[Served]:
    board = HealthBoard()
    board.set([DeviceHealth(node, "slot-0", True)])
    preparer = CdiPreparer(pool=node)
    served = Served(DraPluginServer(preparer, SOCKETS, health=board), preparer, board)
    served.start()
    try:
        yield served
    finally:
        served.stop()


def test_the_real_kubelet_registers_the_driver_prepares_a_scheduled_claim_and_releases_it(
    cluster: Cluster, node: str, plugin: Served
) -> None:
    server, preparer = plugin.server, plugin.preparer
    wait_for("the kubelet to register the DRA driver", lambda: server.registration.status is not None, 30)
    assert server.registration.status == (True, "")

    resource = client.ResourceV1Api(cluster.api)
    tag = secrets.token_hex(3)
    namespace, device_class = f"fpga-slot-e2e-dra-{tag}", f"fpga-slot-e2e-{tag}"
    slice_name = ""
    cluster.core.create_namespace({"metadata": {"name": namespace}})
    stack = contextlib.ExitStack()
    try:
        publisher = ResourceSlicePublisher(cluster.api, DRIVER_NAME, node, interval_s=1.0)
        slice_name = publisher.name
        publisher.set_devices([SliceDevice("slot-0", {"platform": "sim-pr-v1", "healthy": True, "bitstream": ""})])
        assert publisher.reconcile() == "created"
        assert publisher.reconcile() == "unchanged"
        stack.enter_context(publishing(publisher))
        published = resource.read_resource_slice(slice_name)
        assert published.metadata.owner_references[0].name == node  # deleted with its Node
        resource.create_device_class(
            {
                "metadata": {"name": device_class},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER_NAME}"'}}]},
            }
        )
        resource.create_namespaced_resource_claim(
            namespace,
            {
                "metadata": {"name": "fpga"},
                "spec": {
                    "devices": {
                        "requests": [{"name": "fpga", "exactly": {"deviceClassName": device_class}}],
                        "config": [{"opaque": {"driver": DRIVER_NAME, "parameters": {"bitstream": "aes-gcm"}}}],
                    }
                },
            },
        )
        cluster.core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": "uses-a-slot"},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "resourceClaims": [{"name": "fpga", "resourceClaimName": "fpga"}],
                    "containers": [
                        {
                            "name": "main",
                            "image": IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", SHOW_SLOT],
                            "resources": {"claims": [{"name": "fpga"}]},
                        }
                    ],
                },
            },
        )
        claim_uid = resource.read_namespaced_resource_claim("fpga", namespace).metadata.uid
        log = cluster.wait_log(namespace, "uses-a-slot", lambda text: "slots=" in text, "with the slot's env")
        # prepared by us, injected by containerd through CDI: the slot's env and its device node
        assert "slots=e2e-card0-port0 device=/dev/fpga-e2e-slot0" in log
        assert "char-device" in cluster.wait_log(namespace, "uses-a-slot", lambda t: "char-device" in t, "device")
        allocated = resource.read_namespaced_resource_claim("fpga", namespace)
        (result,) = allocated.status.allocation.devices.results
        assert (result.driver, result.pool, result.device) == (DRIVER_NAME, node, "slot-0")
        assert ("prepare", claim_uid) in preparer.calls
        # what the driver reads of the claim at NodePrepareResources
        info = ClaimReader(cluster.api, DRIVER_NAME).read(namespace, "fpga", claim_uid)
        (device,) = info.devices
        assert (device.request, device.pool, device.device) == ("fpga", node, "slot-0")
        assert info.parameters_for(device) == {"bitstream": "aes-gcm"}
        assert [name for name, _ in info.reserved_for] == ["uses-a-slot"]
        with pytest.raises(KubeError, match="was replaced"):
            ClaimReader(cluster.api, DRIVER_NAME).read(namespace, "fpga", "00000000-0000-4000-8000-000000000000")
        assert preparer.specs.path(claim_uid).is_file()
        # the kubelet shows our resource-health stream in the pod's status, and follows its changes
        cluster.wait_pod(namespace, "uses-a-slot", lambda p: _slot_health(p) == "Healthy", "with its slot Healthy")
        plugin.set_health([DeviceHealth(node, "slot-0", False, "card unplugged")])
        cluster.wait_pod(namespace, "uses-a-slot", lambda p: _slot_health(p) == "Unhealthy", "with its slot Unhealthy")

        cluster.core.delete_namespaced_pod("uses-a-slot", namespace, grace_period_seconds=0)
        wait_for("NodeUnprepareResources for the claim", lambda: ("unprepare", claim_uid) in preparer.calls)
        assert not preparer.specs.path(claim_uid).exists()

        # the kubelet wipes a node's slices when it starts: the next check puts ours back
        old_uid = resource.read_resource_slice(slice_name).metadata.uid
        resource.delete_resource_slice(slice_name)
        wait_for(
            "the publisher to put the slice back",
            lambda: (
                not _gone(lambda: resource.read_resource_slice(slice_name))
                and resource.read_resource_slice(slice_name).metadata.uid != old_uid
            ),
            15,
        )
        assert resource.read_resource_slice(slice_name).spec.devices[0].name == "slot-0"
    finally:
        stack.close()
        for delete in (
            lambda: resource.delete_device_class(device_class),
            lambda: resource.delete_resource_slice(slice_name) if slice_name else None,
            lambda: cluster.core.delete_namespace(namespace),
        ):
            try:
                delete()
            except ApiException as exc:
                if exc.status != 404:
                    raise
