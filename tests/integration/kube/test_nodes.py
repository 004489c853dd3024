"""NodePublisher and list_nodes over real HTTP: what reaches the Node, how often, and after which failures."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import AsyncIterator, Set
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from agent.demo.kubeapi import DEFAULT_NODE, FakeKubeApiServer, RecordedRequest, running_apiserver
from agent.errors import KubeError
from agent.kube import (
    BITSTREAMS_ANNOTATION,
    HEARTBEAT_ANNOTATION,
    PLATFORM_LABEL,
    PLATFORM_LABEL_PREFIX,
    SLOTS_ANNOTATION,
    NodePublisher,
    build_api_client,
    list_nodes,
)
from tests.integration.kube.conftest import FAST_BACKOFF, TIMEOUT_S

NODE_PATH = f"/api/v1/nodes/{DEFAULT_NODE}"
SIM = "sim-pr-v1"
DFL = "ce48969a6b3b5d0f9bdeb2b4a1e6a2c1"
ZYNQ = "Xilinx ZynqMP FPGA Manager"
SLOTS_A = '[{"id":"c0-s0","card":"c0","numa":0,"platform":"sim-pr-v1","bitstream":null,"accelerator":null,"free":true,"healthy":true,"last_used":null}]'  # noqa: E501
SLOTS_B = SLOTS_A.replace('"free":true', '"free":false')
BITSTREAMS = '{"aes":"sim-pr-v1"}'


@contextlib.asynccontextmanager
async def publishing(
    api_client: client.ApiClient, node: str = DEFAULT_NODE, **kwargs: Any
) -> AsyncIterator[NodePublisher]:
    """A NodePublisher running as a task; cancelled afterwards."""
    kwargs.setdefault("backoff", FAST_BACKOFF)
    publisher = NodePublisher(api_client, node, **kwargs)
    task = asyncio.create_task(publisher.run(), name="node-publisher-under-test")
    try:
        yield publisher
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def publish(publisher: NodePublisher, slots: str = SLOTS_A, platforms: Set[str] = frozenset({SIM})) -> None:
    publisher.update(slots, BITSTREAMS, platforms)
    assert await publisher.wait_published(TIMEOUT_S)


def patches(api: FakeKubeApiServer) -> list[RecordedRequest]:
    return api.requests("PATCH", NODE_PATH)


def reads(api: FakeKubeApiServer) -> list[RecordedRequest]:
    return api.requests("GET", NODE_PATH)


def meta(api: FakeKubeApiServer, node: str = DEFAULT_NODE) -> dict[str, Any]:
    found = api.node(node)
    assert found is not None
    return dict(found["metadata"])


def owned_labels(api: FakeKubeApiServer) -> dict[str, str]:
    labels = meta(api).get("labels") or {}
    return {k: v for k, v in labels.items() if k == PLATFORM_LABEL or k.startswith(PLATFORM_LABEL_PREFIX)}


def other_labels(api: FakeKubeApiServer) -> dict[str, str]:
    labels = meta(api).get("labels") or {}
    return {k: v for k, v in labels.items() if k != PLATFORM_LABEL and not k.startswith(PLATFORM_LABEL_PREFIX)}


def our_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name == "agent.kube.nodes"]


async def test_publishes_the_owned_keys_and_leaves_everything_else_alone(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node(
        DEFAULT_NODE,
        labels={"team": "fpga", PLATFORM_LABEL_PREFIX + "old-pr": "true", PLATFORM_LABEL: "old-pr"},
        annotations={"owner": "ops", "example.com/other": "x"},
    )
    before = meta(apiserver)

    async with publishing(api_client, clock=lambda: 1_700_000_000.5) as publisher:
        await publish(publisher)

    after = meta(apiserver)
    assert after["annotations"] == {
        **before["annotations"],
        SLOTS_ANNOTATION: SLOTS_A,
        BITSTREAMS_ANNOTATION: BITSTREAMS,
        HEARTBEAT_ANNOTATION: "1700000000",
    }
    assert other_labels(apiserver) == {
        k: v for k, v in before["labels"].items() if k not in (PLATFORM_LABEL_PREFIX + "old-pr", PLATFORM_LABEL)
    }
    assert owned_labels(apiserver) == {PLATFORM_LABEL_PREFIX + SIM: "true", PLATFORM_LABEL: SIM}
    [patch] = patches(apiserver)
    assert patch.headers["content-type"] == "application/merge-patch+json"
    assert patch.body == {
        "metadata": {
            "annotations": {
                SLOTS_ANNOTATION: SLOTS_A,
                BITSTREAMS_ANNOTATION: BITSTREAMS,
                HEARTBEAT_ANNOTATION: "1700000000",
            },
            "labels": {
                PLATFORM_LABEL_PREFIX + SIM: "true",
                PLATFORM_LABEL: SIM,
                PLATFORM_LABEL_PREFIX + "old-pr": None,
            },
        }
    }
    # Only get and patch of this one Node (what the RBAC role grants).
    assert {(r.method, r.path) for r in apiserver.requests()} == {("GET", NODE_PATH), ("PATCH", NODE_PATH)}


async def test_patches_only_what_changed_and_only_when_something_did(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node(DEFAULT_NODE)
    async with publishing(api_client) as publisher:
        await publish(publisher, SLOTS_A)
        await publish(publisher, SLOTS_A)  # the same state again
        assert (len(reads(apiserver)), len(patches(apiserver))) == (1, 1)
        await publish(publisher, SLOTS_B)
        assert len(patches(apiserver)) == 2
        assert patches(apiserver)[1].body == {"metadata": {"annotations": {SLOTS_ANNOTATION: SLOTS_B}}}
        assert publisher.patches == 2

    # A restarted agent with unchanged slots reads the Node and writes nothing.
    async with publishing(api_client) as restarted:
        await publish(restarted, SLOTS_B)
    assert (len(reads(apiserver)), len(patches(apiserver))) == (2, 2)


async def test_a_burst_of_changes_becomes_few_patches_ending_in_the_last_state(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node(DEFAULT_NODE)
    states = [SLOTS_A.replace('"last_used":null', f'"last_used":{n}') for n in range(50)]
    async with publishing(api_client) as publisher:
        for state in states:
            publisher.update(state, BITSTREAMS, {SIM})
            await asyncio.sleep(0)  # let the publisher run between updates, as the device plugin would
        assert await publisher.wait_published(TIMEOUT_S)

    assert meta(apiserver)["annotations"][SLOTS_ANNOTATION] == states[-1]
    # The first change goes out at once, the rest waits for the pace (about 2 per second) and is folded together.
    assert 1 <= len(patches(apiserver)) <= 3


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        pytest.param(500, "HTTP 500", id="internal-error"),
        pytest.param(409, "HTTP 409", id="conflict"),
        pytest.param(429, "HTTP 429", id="too-many-requests"),
        pytest.param(403, "HTTP 403", id="forbidden-until-rbac-is-fixed"),
    ],
)
async def test_a_refused_patch_is_retried_with_backoff_and_logged_once(
    apiserver: FakeKubeApiServer,
    api_client: client.ApiClient,
    caplog: pytest.LogCaptureFixture,
    code: int,
    kind: str,
) -> None:
    apiserver.add_node(DEFAULT_NODE)
    apiserver.fail_next("PATCH", NODE_PATH, code, times=3)
    with caplog.at_level(logging.DEBUG, logger="agent.kube.nodes"):
        async with publishing(api_client, min_interval_s=0.0) as publisher:
            await publish(publisher)

    assert meta(apiserver)["annotations"][SLOTS_ANNOTATION] == SLOTS_A
    assert (publisher.failures, publisher.patches, len(patches(apiserver))) == (3, 1, 4)
    # After a failure the outcome is unknown: the Node is read again before the next patch.
    assert len(reads(apiserver)) == 4
    [warning] = our_warnings(caplog)
    assert f"publishing slot state on node {DEFAULT_NODE} failed: {kind}" in warning
    assert any("works again after 3 failed attempts" in r.getMessage() for r in caplog.records)


async def test_a_node_that_is_not_there_yet_is_published_once_it_is(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    async with publishing(api_client) as publisher:
        publisher.update(SLOTS_A, BITSTREAMS, {SIM})
        await apiserver.until(lambda: len(reads(apiserver)) >= 3)
        assert not publisher.published
        apiserver.add_node(DEFAULT_NODE)
        assert await publisher.wait_published(TIMEOUT_S)

    assert meta(apiserver)["annotations"][SLOTS_ANNOTATION] == SLOTS_A
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
        await publish(publisher, SLOTS_A, {ZYNQ, SIM})
        await publish(publisher, SLOTS_B, {ZYNQ, SIM})
    [warning] = our_warnings(caplog)
    assert repr(ZYNQ) in warning
    assert "not a valid label value" in warning


async def test_a_recreated_node_gets_the_state_again_at_the_next_resync(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node(DEFAULT_NODE)
    async with publishing(api_client, resync_s=0.05) as publisher:
        await publish(publisher)
        apiserver.add_node(DEFAULT_NODE)  # the kubelet registered its Node anew: no annotations of ours
        await apiserver.until(lambda: SLOTS_ANNOTATION in meta(apiserver)["annotations"], TIMEOUT_S)
    assert owned_labels(apiserver) == {PLATFORM_LABEL_PREFIX + SIM: "true", PLATFORM_LABEL: SIM}
    assert len(patches(apiserver)) == 2


async def test_nothing_is_patched_before_the_node_was_read(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    """update() only stores (it is not even a coroutine); the patch waits until the Node could be read."""
    apiserver.add_node(DEFAULT_NODE)
    apiserver.fail_next("GET", NODE_PATH, 503, times=1000)
    async with publishing(api_client) as publisher:
        for n in range(100):
            publisher.update(SLOTS_A, BITSTREAMS, {SIM} if n % 2 else {DFL})
        assert not publisher.published
        await apiserver.until(lambda: len(reads(apiserver)) >= 2)
    apiserver.clear_faults()
    assert patches(apiserver) == []


# ------------------------------------------------------------------------- list_nodes
async def test_list_nodes_returns_every_node_with_only_the_owned_keys(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node("node-b", annotations={SLOTS_ANNOTATION: "[]", "other": "x"}, labels={PLATFORM_LABEL: SIM})
    apiserver.add_node("node-a")
    nodes = await asyncio.to_thread(list_nodes, api_client)
    assert [node.name for node in nodes] == ["node-a", "node-b"]
    assert (nodes[0].annotations, nodes[0].labels) == ({}, {})
    assert (nodes[1].annotations, nodes[1].labels) == ({SLOTS_ANNOTATION: "[]"}, {PLATFORM_LABEL: SIM})
    [request] = apiserver.list_requests("nodes")
    assert request.query["limit"] == "500"


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


def test_slot_json_in_this_module_is_compact() -> None:
    """The fixtures above are what the agent renders (compact JSON), so the byte comparisons mean something."""
    assert json.dumps(json.loads(SLOTS_A), separators=(",", ":")) == SLOTS_A


async def test_the_heartbeat_is_renewed_alone_once_it_is_due_and_nothing_else_changed(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node(DEFAULT_NODE)
    now = [1_700_000_000.0]
    async with publishing(api_client, clock=lambda: now[0], heartbeat_s=0.2) as publisher:
        await publish(publisher)
        assert meta(apiserver)["annotations"][HEARTBEAT_ANNOTATION] == "1700000000"
        now[0] += 60.0
        async with asyncio.timeout(TIMEOUT_S):
            for _ in itertools.count():
                if meta(apiserver)["annotations"].get(HEARTBEAT_ANNOTATION) == "1700000060":
                    break
                await asyncio.sleep(0.05)
    renewal = patches(apiserver)[-1]
    assert renewal.body == {"metadata": {"annotations": {HEARTBEAT_ANNOTATION: "1700000060"}}}


async def test_clear_removes_every_owned_key_and_leaves_the_others(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node(DEFAULT_NODE, labels={"team": "fpga"}, annotations={"owner": "ops"})
    async with publishing(api_client) as publisher:
        await publish(publisher)
    assert owned_labels(apiserver)
    assert await publisher.clear()
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
