"""The agent's clean stop in either mode: its FpgaNodeState and the Node's platform labels go when no agent pod
follows on the node (uninstalled, or not run in a pod), and stay for the next agent when its DaemonSet goes on
(an update: the successor publishes over them).

For a one-step uninstall (``kubectl delete -k``) the agent relies on the cleanup grant the install's Job made
(it makes no RBAC object itself), and after an uninstall the agent that finds no Node with slot state left
releases its ServiceAccount's finalizer (an update keeps it). Without the grant its requests are refused: it
says so once and leaves the Node for ``fpga-agent uninstall``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent.app import Agent, connect_kube
from agent.demo.kubelet.dra import DraKubelet
from agent.kube.cleanupgrant import ACCOUNT, FINALIZER
from agent.kube.nodefields import PLATFORM_LABEL_PREFIX
from tests.fakeapi import DEFAULT_NODE, FakeKubeApiServer, make_pod, running_apiserver
from tests.fakes import KubeletStandIn, test_config
from tests.integration.reconfigure.support import Bitstreams

WAIT_S = 10.0
NAMESPACE = "fpga-slot"
DAEMONSET = "fpga-slot-agent"
POD = "fpga-slot-agent-x7k2p"


def has_state(api: FakeKubeApiServer) -> bool:
    return api.node_state(NAMESPACE, DEFAULT_NODE) is not None


def owned(api: FakeKubeApiServer) -> dict[str, str]:
    """The Node's annotations and labels that belong to the agent."""
    meta = api.node(DEFAULT_NODE)["metadata"]
    keys = {**meta.get("annotations", {}), **meta.get("labels", {})}
    return {k: v for k, v in keys.items() if k.startswith(("example.com/fpga-", PLATFORM_LABEL_PREFIX))}


def agent_pod(api: FakeKubeApiServer) -> None:
    pod: dict[str, Any] = make_pod(POD, namespace=NAMESPACE, slots=())
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": DAEMONSET, "uid": "u-1", "controller": True}
    ]
    api.put_pod(pod)


@contextlib.asynccontextmanager
async def agent_stopping(
    root: Path, bitstreams: Bitstreams, mode: str, pod_name: str, server: FakeKubeApiServer | None = None
) -> AsyncIterator[FakeKubeApiServer]:
    """The agent in ``mode`` publishing on its Node; on leaving the block it is stopped (as on SIGTERM). A new API
    server with the Node and the agent's ServiceAccount, or ``server`` as it is."""
    with contextlib.nullcontext(server) if server is not None else running_apiserver() as api:
        if server is None:
            api.add_node(DEFAULT_NODE, labels={"team": "fpga"}, annotations={"owner": "ops"})
            api.put_service_account(NAMESPACE, ACCOUNT, finalizers=[FINALIZER])
        config = dataclasses.replace(
            test_config(root, node_name=DEFAULT_NODE, mode=mode),
            kubeconfig=api.write_kubeconfig(root / "kubeconfig"),
            namespace=NAMESPACE,
            pod_name=pod_name,
        )
        config.dra_registry_dir.mkdir(parents=True, exist_ok=True)
        kubelet = KubeletStandIn(config.device_plugin_dir, config.pod_resources_socket)
        await kubelet.start()
        agent = Agent(config, catalog=bitstreams.catalog, kube=connect_kube(config))
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop), name="agent-under-test")
        try:
            if mode == "dra":
                dra = DraKubelet(config.dra_registry_dir)
                await api.until(lambda: bool(dra.sockets()), WAIT_S)
                await asyncio.to_thread(dra.register, dra.sockets()[0])
            await api.until(lambda: has_state(api) and "example.com/fpga-platform" in owned(api), WAIT_S)
            yield api
        finally:
            stop.set()
            async with asyncio.timeout(WAIT_S):
                await task
            await kubelet.stop()


@pytest.mark.parametrize("mode", ["device-plugin", "dra"])
@pytest.mark.parametrize(
    ("situation", "stays"),
    [("not-in-a-pod", False), ("daemonset-goes-on", True), ("daemonset-deleted", False), ("daemonset-deleting", False)],
)
async def test_a_clean_stop_removes_the_nodes_fpga_keys_unless_the_daemonset_starts_another_agent(
    sock_dir: Path, bitstreams: Bitstreams, mode: str, situation: str, stays: bool
) -> None:
    async with agent_stopping(sock_dir, bitstreams, mode, "" if situation == "not-in-a-pod" else POD) as api:
        if situation != "not-in-a-pod":
            agent_pod(api)
        if situation in ("daemonset-goes-on", "daemonset-deleting"):
            api.put_daemonset(NAMESPACE, DAEMONSET, deleting=situation == "daemonset-deleting")
        published = owned(api)
        assert "example.com/fpga-platform" in published
    after = api.node(DEFAULT_NODE)["metadata"]
    assert owned(api) == (published if stays else {})
    assert has_state(api) is stays
    assert after["annotations"]["owner"] == "ops"
    assert after["labels"]["team"] == "fpga"
    # The finalizer is released only by an agent of the DaemonSet that was uninstalled.
    account = api.service_account(NAMESPACE, ACCOUNT)
    assert account is not None
    released = situation in ("daemonset-deleted", "daemonset-deleting")
    assert account["metadata"]["finalizers"] == ([] if released else [FINALIZER])
    assert rbac_requests(api) == []


@pytest.mark.parametrize("mode", ["device-plugin", "dra"])
async def test_a_force_deleted_agent_pod_leaves_the_state_for_the_next_agent(
    sock_dir: Path, bitstreams: Bitstreams, mode: str
) -> None:
    """``kubectl delete pod --force`` removes the pod object before its container stops: the agent still knows
    its DaemonSet from its start, which goes on, so the Node keeps its state for the next agent."""
    with running_apiserver() as api:
        api.add_node(DEFAULT_NODE, labels={"team": "fpga"}, annotations={"owner": "ops"})
        api.put_service_account(NAMESPACE, ACCOUNT, finalizers=[FINALIZER])
        agent_pod(api)
        api.put_daemonset(NAMESPACE, DAEMONSET)
        async with agent_stopping(sock_dir, bitstreams, mode, POD, server=api):
            published = owned(api)
            api.delete_pod(NAMESPACE, POD)
        assert owned(api) == published
        assert has_state(api)


def rbac_requests(api: FakeKubeApiServer) -> list[str]:
    """What the agent asked of RBAC objects and of its Namespace: nothing (the install's Job makes the grant)."""
    return [
        f"{r.method} {r.path}"
        for r in api.requests()
        if r.path.startswith("/apis/rbac.authorization.k8s.io/") or r.path == f"/api/v1/namespaces/{NAMESPACE}"
    ]


@pytest.mark.parametrize("mode", ["device-plugin", "dra"])
async def test_kubectl_delete_k_leaves_no_account_once_the_last_node_is_clean(
    sock_dir: Path, bitstreams: Bitstreams, mode: str
) -> None:
    """As ``kubectl delete -k`` leaves it: DaemonSet gone, ServiceAccount being deleted (kept by its finalizer).
    While another Node still carries slot state (its agent has not stopped yet) the finalizer stays; the agent
    that clears the last Node releases it, and the account goes."""
    with running_apiserver() as api:
        api.add_node(DEFAULT_NODE)
        api.put_service_account(NAMESPACE, ACCOUNT, finalizers=[FINALIZER])
        async with agent_stopping(sock_dir, bitstreams, mode, POD, server=api):
            agent_pod(api)
            api.put_service_account(NAMESPACE, ACCOUNT, finalizers=[FINALIZER], deleting=True)
            api.add_node("node-b", labels={PLATFORM_LABEL_PREFIX + "sim-pr-v1": "true"})
        assert owned(api) == {}
        assert not has_state(api)
        account = api.service_account(NAMESPACE, ACCOUNT)
        assert account is not None
        assert account["metadata"]["finalizers"] == [FINALIZER]
        # node-b's agent clears its Node and looks in turn; here a second run on this node is that last agent.
        api.add_node("node-b")
        async with agent_stopping(sock_dir, bitstreams, mode, POD, server=api):
            pass
        assert owned(api) == {}
        assert api.service_account(NAMESPACE, ACCOUNT) is None


@pytest.mark.parametrize("mode", ["device-plugin", "dra"])
async def test_without_the_cleanup_grant_an_uninstalled_agent_says_once_that_it_leaves_the_node(
    sock_dir: Path, bitstreams: Bitstreams, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``kubectl delete -k`` when the grant's Job could not run: the agent's ClusterRole is gone, so reading its own
    pod is refused (403). It leaves the Node's keys and the account's finalizer for ``fpga-agent uninstall``, with
    one warning."""
    async with agent_stopping(sock_dir, bitstreams, mode, POD) as api:
        agent_pod(api)
        published = owned(api)
        api.fail_next("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{POD}", 403, message="forbidden by the test")
        caplog.clear()
    assert owned(api) == published
    assert has_state(api)
    account = api.service_account(NAMESPACE, ACCOUNT)
    assert account is not None
    assert account["metadata"]["finalizers"] == [FINALIZER]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"slot state left on node {DEFAULT_NODE}" in warnings[0]
    assert "fpga-agent uninstall" in warnings[0]
    assert "forbidden by the test" in warnings[0]
    assert rbac_requests(api) == []
