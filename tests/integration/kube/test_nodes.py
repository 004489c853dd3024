"""NodePublisher and the cluster view's lists over real HTTP: the FpgaNodeState, the Node's labels, how often
each is written, and after which failures."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Set
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from agent.errors import KubeError
from agent.kube.client import build_api_client
from agent.kube.nodefields import PLATFORM_LABEL, PLATFORM_LABEL_PREFIX
from agent.kube.nodes import NodePublisher, list_node_states, list_nodes
from agent.slots.published import parse_state
from tests.fakeapi import DEFAULT_NODE, FakeKubeApiServer, RecordedRequest, running_apiserver
from tests.integration.kube.conftest import FAST_BACKOFF, TIMEOUT_S

NAMESPACE = "fpga-slot"
NODE_PATH = f"/api/v1/nodes/{DEFAULT_NODE}"
STATE_PATH = f"/apis/example.com/v1alpha1/namespaces/{NAMESPACE}/fpganodestates/{DEFAULT_NODE}"
STATES_PATH = f"/apis/example.com/v1alpha1/namespaces/{NAMESPACE}/fpganodestates"
SIM = "sim-pr-v1"
DFL = "ce48969a6b3b5d0f9bdeb2b4a1e6a2c1"
ZYNQ = "Xilinx ZynqMP FPGA Manager"
SLOT = {
    "id": "c0-s0",
    "card": "c0",
    "numa": 0,
    "platform": SIM,
    "bitstream": None,
    "accelerator": None,
    "free": True,
    "healthy": True,
    "lastUsed": None,
}
SPEC_A: dict[str, Any] = {"nodeName": DEFAULT_NODE, "slots": [SLOT], "bitstreams": {"aes": SIM}}
SPEC_B: dict[str, Any] = {**SPEC_A, "slots": [{**SLOT, "free": False}]}
LEGACY = ("example.com/fpga-slots", "example.com/fpga-bitstreams", "example.com/fpga-agent-heartbeat")


@pytest.fixture(autouse=True)
def agent_namespace(apiserver: FakeKubeApiServer) -> None:
    apiserver.namespaces.add(NAMESPACE)


@contextlib.asynccontextmanager
async def publishing(
    api_client: client.ApiClient, node: str = DEFAULT_NODE, **kwargs: Any
) -> AsyncIterator[NodePublisher]:
    """A NodePublisher running as a task; cancelled afterwards."""
    kwargs.setdefault("backoff", FAST_BACKOFF)
    kwargs.setdefault("namespace", NAMESPACE)
    publisher = NodePublisher(api_client, node, **kwargs)
    task = asyncio.create_task(publisher.run(), name="node-publisher-under-test")
    try:
        yield publisher
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def publish(
    publisher: NodePublisher, spec: dict[str, Any] = SPEC_A, platforms: Set[str] = frozenset({SIM})
) -> None:
    publisher.update(spec, platforms)
    await asyncio.wait_for(publisher.settled.wait(), TIMEOUT_S)


def patches(api: FakeKubeApiServer) -> list[RecordedRequest]:
    return api.requests("PATCH", NODE_PATH)


def writes(api: FakeKubeApiServer) -> list[RecordedRequest]:
    return api.requests("PUT", STATE_PATH) + api.requests("POST", STATES_PATH)


def meta(api: FakeKubeApiServer, node: str = DEFAULT_NODE) -> dict[str, Any]:
    found = api.node(node)
    assert found is not None
    return dict(found["metadata"])


def stored_spec(api: FakeKubeApiServer) -> dict[str, Any] | None:
    state = api.node_state(NAMESPACE, DEFAULT_NODE)
    return None if state is None else dict(state["spec"])


def owned_labels(api: FakeKubeApiServer) -> dict[str, str]:
    labels = meta(api).get("labels") or {}
    return {k: v for k, v in labels.items() if k == PLATFORM_LABEL or k.startswith(PLATFORM_LABEL_PREFIX)}


def other_labels(api: FakeKubeApiServer) -> dict[str, str]:
    labels = meta(api).get("labels") or {}
    return {k: v for k, v in labels.items() if k != PLATFORM_LABEL and not k.startswith(PLATFORM_LABEL_PREFIX)}


def our_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name == "agent.kube.nodes"]


async def test_publishes_the_state_object_and_the_labels_and_leaves_everything_else_alone(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    legacy = dict.fromkeys(LEGACY, "[]")  # left on the Node by an earlier version: removed
    apiserver.add_node(
        DEFAULT_NODE,
        labels={"team": "fpga", PLATFORM_LABEL_PREFIX + "old-pr": "true", PLATFORM_LABEL: "old-pr"},
        annotations={"owner": "ops", "example.com/other": "x", **legacy},
    )
    before = meta(apiserver)

    async with publishing(api_client) as publisher:
        await publish(publisher)

    assert stored_spec(apiserver) == SPEC_A
    state = apiserver.node_state(NAMESPACE, DEFAULT_NODE)
    assert state is not None
    assert parse_state(state).slots[0]["id"] == "c0-s0"
    assert "ownerReferences" not in state["metadata"]  # the agent runs in no pod here
    assert meta(apiserver)["annotations"] == {k: v for k, v in before["annotations"].items() if k not in LEGACY}
    assert other_labels(apiserver) == {
        k: v for k, v in before["labels"].items() if k not in (PLATFORM_LABEL_PREFIX + "old-pr", PLATFORM_LABEL)
    }
    assert owned_labels(apiserver) == {PLATFORM_LABEL_PREFIX + SIM: "true", PLATFORM_LABEL: SIM}
    [patch] = patches(apiserver)
    assert patch.headers["content-type"] == "application/merge-patch+json"
    assert patch.body == {
        "metadata": {
            "annotations": dict.fromkeys(LEGACY),
            "labels": {
                PLATFORM_LABEL_PREFIX + SIM: "true",
                PLATFORM_LABEL: SIM,
                PLATFORM_LABEL_PREFIX + "old-pr": None,
            },
        }
    }
    # Only get and patch of this one Node and get and create of its object (what the RBAC roles grant).
    assert {(r.method, r.path) for r in apiserver.requests()} == {
        ("GET", NODE_PATH),
        ("PATCH", NODE_PATH),
        ("GET", STATE_PATH),
        ("POST", STATES_PATH),
    }


async def test_slot_changes_write_the_object_never_the_node(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node(DEFAULT_NODE)
    async with publishing(api_client, min_interval_s=0.0) as publisher:
        await publish(publisher, SPEC_A)
        await publish(publisher, SPEC_A)  # the same state again
        assert (len(writes(apiserver)), len(patches(apiserver))) == (1, 1)
        for _ in range(5):  # pods come and go: the object follows, the Node's labels stay as they are
            await publish(publisher, SPEC_B)
            await publish(publisher, SPEC_A)
        assert (len(writes(apiserver)), len(patches(apiserver))) == (11, 1)
        assert publisher.writes == 11
    assert stored_spec(apiserver) == SPEC_A

    # A restarted agent with unchanged slots reads both and writes nothing.
    async with publishing(api_client) as restarted:
        await publish(restarted, SPEC_A)
    assert (len(writes(apiserver)), len(patches(apiserver))) == (11, 1)


async def test_the_object_is_owned_by_the_daemonset_that_runs_the_agents_pod(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node(DEFAULT_NODE)
    daemonset = apiserver.put_daemonset(NAMESPACE, "fpga-slot-agent")
    owner = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "fpga-slot-agent",
        "uid": daemonset["metadata"]["uid"],
    }
    pod = apiserver.add_pod("fpga-slot-agent-x1", namespace=NAMESPACE)
    pod["metadata"]["ownerReferences"] = [{**owner, "controller": True}]
    apiserver.put_pod(pod)
    # An object left by an earlier install (another DaemonSet) gets the new owner.
    stale = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "fpga-slot-agent", "uid": "gone"}
    async with publishing(api_client) as first:
        await publish(first)
    state = apiserver.node_state(NAMESPACE, DEFAULT_NODE)
    assert state is not None
    state["metadata"]["ownerReferences"] = [stale]
    apiserver.delete_node_state(NAMESPACE, DEFAULT_NODE)
    apiserver.put_node_state(state)

    async with publishing(api_client, pod_name="fpga-slot-agent-x1") as publisher:
        await publish(publisher)
    state = apiserver.node_state(NAMESPACE, DEFAULT_NODE)
    assert state is not None
    assert state["metadata"]["ownerReferences"] == [owner]
    assert state["spec"] == SPEC_A


async def test_a_burst_of_changes_becomes_few_writes_ending_in_the_last_state(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node(DEFAULT_NODE)
    specs = [{**SPEC_A, "slots": [{**SLOT, "lastUsed": n}]} for n in range(50)]
    async with publishing(api_client) as publisher:
        for spec in specs:
            publisher.update(spec, {SIM})
            await asyncio.sleep(0)  # let the publisher run between updates, as the device plugin would
        await asyncio.wait_for(publisher.settled.wait(), TIMEOUT_S)

    assert stored_spec(apiserver) == specs[-1]
    # The first change goes out at once, the rest waits for the pace (about 2 per second) and is folded together.
    assert 1 <= len(writes(apiserver)) <= 3


@pytest.mark.parametrize(
    ("method", "path", "code", "kind"),
    [
        pytest.param("POST", STATES_PATH, 500, "HTTP 500", id="create-internal-error"),
        pytest.param("POST", STATES_PATH, 403, "HTTP 403", id="create-forbidden-until-rbac-is-fixed"),
        pytest.param("PATCH", NODE_PATH, 429, "HTTP 429", id="labels-too-many-requests"),
        pytest.param("PATCH", NODE_PATH, 409, "HTTP 409", id="labels-conflict"),
    ],
)
async def test_a_refused_write_is_retried_with_backoff_and_logged_once(
    apiserver: FakeKubeApiServer,
    api_client: client.ApiClient,
    caplog: pytest.LogCaptureFixture,
    method: str,
    path: str,
    code: int,
    kind: str,
) -> None:
    apiserver.add_node(DEFAULT_NODE)
    apiserver.fail_next(method, path, code, times=3)
    with caplog.at_level(logging.DEBUG, logger="agent.kube.nodes"):
        async with publishing(api_client, min_interval_s=0.0) as publisher:
            await publish(publisher)

    assert stored_spec(apiserver) == SPEC_A
    assert owned_labels(apiserver) == {PLATFORM_LABEL_PREFIX + SIM: "true", PLATFORM_LABEL: SIM}
    assert len(apiserver.requests(method, path)) == 4
    [warning] = our_warnings(caplog)
    assert f"publishing slot state of node {DEFAULT_NODE} failed: {kind}" in warning
    assert any("works again after 3 failed attempts" in r.getMessage() for r in caplog.records)


async def test_an_object_changed_or_deleted_by_someone_else_is_put_right(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node(DEFAULT_NODE)
    async with publishing(api_client, min_interval_s=0.0, resync_s=0.05) as publisher:
        await publish(publisher)
        apiserver.delete_node_state(NAMESPACE, DEFAULT_NODE)
        await apiserver.until(lambda: stored_spec(apiserver) == SPEC_A, TIMEOUT_S)
        state = apiserver.node_state(NAMESPACE, DEFAULT_NODE)
        assert state is not None
        state["spec"]["slots"] = []
        apiserver.put_node_state(state)  # a newer resourceVersion than the publisher saw: its PUT conflicts
        await publish(publisher, SPEC_B)
    assert stored_spec(apiserver) == SPEC_B


async def test_a_node_that_is_not_there_yet_is_published_once_it_is(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    async with publishing(api_client) as publisher:
        publisher.update(SPEC_A, {SIM})
        await apiserver.until(lambda: len(apiserver.requests("GET", NODE_PATH)) >= 3)
        assert not publisher.settled.is_set()
        apiserver.add_node(DEFAULT_NODE)
        await asyncio.wait_for(publisher.settled.wait(), TIMEOUT_S)

    assert owned_labels(apiserver) == {PLATFORM_LABEL_PREFIX + SIM: "true", PLATFORM_LABEL: SIM}
    assert stored_spec(apiserver) == SPEC_A
    assert len([w for w in our_warnings(caplog) if "HTTP 404" in w]) == 1


@pytest.mark.parametrize(
    ("existing", "platforms", "expected"),
    [
        pytest.param({}, {SIM}, {PLATFORM_LABEL_PREFIX + SIM: "true", PLATFORM_LABEL: SIM}, id="one-platform"),
        pytest.param({}, {DFL}, {PLATFORM_LABEL_PREFIX + DFL: "true", PLATFORM_LABEL: DFL}, id="dfl-interface-id"),
        pytest.param(
            {},
            {SIM, DFL},
            {PLATFORM_LABEL_PREFIX + SIM: "true", PLATFORM_LABEL_PREFIX + DFL: "true"},
            id="two-platforms-no-single-label",
        ),
        pytest.param(
            {PLATFORM_LABEL_PREFIX + "old-pr": "true", PLATFORM_LABEL: "old-pr"},
            {SIM},
            {PLATFORM_LABEL_PREFIX + SIM: "true", PLATFORM_LABEL: SIM},
            id="stale-platform-removed",
        ),
        pytest.param({PLATFORM_LABEL_PREFIX + SIM: "true", PLATFORM_LABEL: SIM}, set(), {}, id="no-slots-no-labels"),
        pytest.param({}, {ZYNQ, SIM}, {PLATFORM_LABEL_PREFIX + SIM: "true"}, id="invalid-platform-skipped"),
        pytest.param({}, {ZYNQ}, {}, id="only-platform-invalid"),
        pytest.param({}, {"a" * 64}, {}, id="platform-too-long"),
        pytest.param({}, {"-sim"}, {}, id="platform-not-alphanumeric-at-the-start"),
        pytest.param(
            {}, {"a" * 63}, {PLATFORM_LABEL_PREFIX + "a" * 63: "true", PLATFORM_LABEL: "a" * 63}, id="63-chars"
        ),
    ],
)
async def test_platform_labels(
    apiserver: FakeKubeApiServer,
    api_client: client.ApiClient,
    existing: dict[str, str],
    platforms: set[str],
    expected: dict[str, str],
) -> None:
    apiserver.add_node(DEFAULT_NODE, labels={"team": "fpga", **existing})
    others = other_labels(apiserver)
    async with publishing(api_client) as publisher:
        await publish(publisher, platforms=platforms)
    assert owned_labels(apiserver) == expected
    assert other_labels(apiserver) == others


async def test_labels_follow_the_platforms_as_they_change(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node(DEFAULT_NODE)
    steps: list[tuple[set[str], dict[str, str]]] = [
        ({SIM}, {PLATFORM_LABEL_PREFIX + SIM: "true", PLATFORM_LABEL: SIM}),
        ({SIM, DFL}, {PLATFORM_LABEL_PREFIX + SIM: "true", PLATFORM_LABEL_PREFIX + DFL: "true"}),
        ({DFL}, {PLATFORM_LABEL_PREFIX + DFL: "true", PLATFORM_LABEL: DFL}),
        (set(), {}),
    ]
    async with publishing(api_client, min_interval_s=0.0) as publisher:
        for platforms, expected in steps:
            await publish(publisher, platforms=platforms)
            assert owned_labels(apiserver) == expected, platforms


async def test_an_invalid_platform_is_logged_once(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    apiserver.add_node(DEFAULT_NODE)
    async with publishing(api_client, min_interval_s=0.0) as publisher:
        await publish(publisher, SPEC_A, {ZYNQ, SIM})
        await publish(publisher, SPEC_B, {ZYNQ, SIM})
    [warning] = our_warnings(caplog)
    assert repr(ZYNQ) in warning
    assert "not a valid label value" in warning


async def test_a_recreated_node_gets_the_state_again_at_the_next_resync(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node(DEFAULT_NODE)
    async with publishing(api_client, resync_s=0.05) as publisher:
        await publish(publisher)
        apiserver.add_node(DEFAULT_NODE)  # the kubelet registered its Node anew: no labels of ours
        await apiserver.until(lambda: bool(owned_labels(apiserver)), TIMEOUT_S)
    assert owned_labels(apiserver) == {PLATFORM_LABEL_PREFIX + SIM: "true", PLATFORM_LABEL: SIM}
    assert len(patches(apiserver)) == 2
    assert len(writes(apiserver)) == 1


async def test_nothing_is_patched_on_the_node_before_it_was_read(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    """update() only stores (it is not even a coroutine); the patch waits until the Node could be read."""
    apiserver.add_node(DEFAULT_NODE)
    apiserver.fail_next("GET", NODE_PATH, 503, times=1000)
    async with publishing(api_client) as publisher:
        for n in range(100):
            publisher.update(SPEC_A, {SIM} if n % 2 else {DFL})
        assert not publisher.settled.is_set()
        await apiserver.until(lambda: len(apiserver.requests("GET", NODE_PATH)) >= 2)
    apiserver.clear_faults()
    assert patches(apiserver) == []


# ------------------------------------------------------------------------- list_nodes
async def test_list_nodes_and_states_return_every_node_and_object_with_only_what_the_view_reads(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node("node-b", annotations={"other": "x"}, labels={PLATFORM_LABEL: SIM, "team": "fpga"})
    apiserver.add_node("node-a")
    async with publishing(api_client, "node-b") as publisher:
        await publish(publisher, {**SPEC_A, "nodeName": "node-b"})
    nodes = await asyncio.to_thread(list_nodes, api_client)
    labels = {PLATFORM_LABEL: SIM, PLATFORM_LABEL_PREFIX + SIM: "true"}
    assert [(node.name, dict(node.labels)) for node in nodes] == [("node-a", {}), ("node-b", labels)]
    [request] = apiserver.list_requests("nodes")
    assert request.query["limit"] == "500"
    [state] = await asyncio.to_thread(list_node_states, api_client)
    assert parse_state(state).node == "node-b"


@pytest.mark.parametrize(
    ("code", "text"),
    [pytest.param(403, "HTTP 403", id="forbidden"), pytest.param(500, "HTTP 500", id="server-error")],
)
async def test_list_nodes_failure_is_a_kube_error(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient, code: int, text: str
) -> None:
    apiserver.fail_next("GET", "/api/v1/nodes", code)
    with pytest.raises(KubeError, match=f"listing nodes failed: {text}"):
        await asyncio.to_thread(list_nodes, api_client)


async def test_list_nodes_from_an_unreachable_api_server_is_a_kube_error(tmp_path: Path) -> None:
    with running_apiserver() as gone:
        kubeconfig = gone.write_kubeconfig(tmp_path / "kubeconfig")
    api_client = build_api_client(kubeconfig)
    try:
        with pytest.raises(KubeError, match="cannot reach the API server"):
            await asyncio.to_thread(list_nodes, api_client)
    finally:
        api_client.close()


async def test_clear_removes_every_owned_key_and_leaves_the_others(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node(DEFAULT_NODE, labels={"team": "fpga"}, annotations={"owner": "ops"})
    async with publishing(api_client) as publisher:
        await publish(publisher)
    assert owned_labels(apiserver)
    assert stored_spec(apiserver) == SPEC_A
    assert await publisher.clear()
    assert stored_spec(apiserver) is None
    after = meta(apiserver)
    assert {k: v for k, v in after["annotations"].items() if k.startswith("example.com/")} == {}
    assert after["annotations"]["owner"] == "ops"
    assert owned_labels(apiserver) == {}
    assert other_labels(apiserver)["team"] == "fpga"
    assert await publisher.clear()  # nothing left: no patch
    assert patches(apiserver)[-1].body["metadata"]["labels"]  # the last patch was the clearing one


async def test_clear_that_is_refused_says_so_and_returns_false(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    publisher = NodePublisher(api_client, "no-such-node", backoff=FAST_BACKOFF)
    assert not await publisher.clear()
    assert any("slot state not removed" in m for m in our_warnings(caplog))


async def test_clear_leaves_an_object_it_may_no_longer_delete_to_the_garbage_collector(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    """``kubectl delete -k`` deletes the agent's Role with its DaemonSet: the labels still go, which is what the
    uninstall waits for; the object goes with the DaemonSet that owns it."""
    apiserver.add_node(DEFAULT_NODE)
    async with publishing(api_client) as publisher:
        await publish(publisher)
    apiserver.fail_next("DELETE", STATE_PATH, 403, message="the Role is gone")
    assert await publisher.clear()
    assert owned_labels(apiserver) == {}
    assert stored_spec(apiserver) == SPEC_A


async def test_the_labels_are_written_even_while_the_object_cannot_be(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    """A missing CRD or Role (an upgrade that changed only the image) must not keep the node unlabelled."""
    apiserver.add_node(DEFAULT_NODE)
    apiserver.fail_next("POST", STATES_PATH, 404, times=1000)
    async with publishing(api_client) as publisher:
        publisher.update(SPEC_A, {SIM})
        await apiserver.until(lambda: bool(owned_labels(apiserver)), TIMEOUT_S)
        assert not publisher.settled.is_set()
    apiserver.clear_faults()
    assert owned_labels(apiserver) == {PLATFORM_LABEL_PREFIX + SIM: "true", PLATFORM_LABEL: SIM}
    assert stored_spec(apiserver) is None


async def test_a_publisher_in_standby_writes_nothing_and_starts_by_itself_once_it_ends(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    """An update's new agent stands by until it serves (the old one still publishes), then puts its own state
    over what the old one wrote, without waiting for a change of its own or the resync."""
    apiserver.add_node(DEFAULT_NODE)
    standing_by = [True]
    async with publishing(api_client, min_interval_s=0.0) as publisher:
        publisher.standby = lambda: standing_by[0]
        publisher.update(SPEC_A, {SIM})
        await asyncio.sleep(0.2)
        assert [r for r in apiserver.requests() if r.method != "GET"] == []
        meta = {"name": DEFAULT_NODE, "namespace": NAMESPACE, "uid": "u-1", "creationTimestamp": "2026-12-06T00:00:00Z"}
        old = {"metadata": meta, "spec": SPEC_B}
        apiserver.put_node_state(old)  # the old agent's last write
        standing_by[0] = False
        await apiserver.until(lambda: stored_spec(apiserver) == SPEC_A, TIMEOUT_S)
    assert owned_labels(apiserver) == {PLATFORM_LABEL_PREFIX + SIM: "true", PLATFORM_LABEL: SIM}
