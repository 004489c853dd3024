"""The fake API server answers the real client as the real server would (what the agent's tests rely on).

Nodes and patches are here for the node-state publisher and the node cache that come later.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from agent.demo.kubeapi import store as kubeapi_store
from tests.fakeapi import FakeKubeApiServer


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


def _raw_list(core: client.CoreV1Api, **kwargs: Any) -> dict[str, Any]:
    response = core.list_pod_for_all_namespaces(_preload_content=False, **kwargs)
    body: dict[str, Any] = json.loads(response.data)
    return body


def _status(exc: ApiException) -> dict[str, Any]:
    status: dict[str, Any] = json.loads(exc.body)
    return status


def test_list_items_come_without_type_meta_and_with_a_resource_version(
    apiserver: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    apiserver.add_pod("p1")
    body = _raw_list(core)
    assert body["kind"] == "PodList"
    assert body["metadata"]["resourceVersion"] == str(apiserver.resource_version)
    [item] = body["items"]
    assert "kind" not in item
    assert item["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"]


@pytest.mark.parametrize(
    ("selector", "names"),
    [
        pytest.param({"field_selector": "spec.nodeName=node-a"}, ["a1", "a2"], id="node"),
        pytest.param({"field_selector": "spec.nodeName==node-b"}, ["b1"], id="node-double-equals"),
        pytest.param({"field_selector": "spec.nodeName!=node-a"}, ["b1", "free"], id="not-node"),
        pytest.param({"field_selector": "spec.nodeName="}, ["free"], id="unscheduled"),
        pytest.param({"field_selector": "spec.nodeName=node-a,status.phase=Running"}, ["a2"], id="and"),
        pytest.param({"label_selector": "app=x"}, ["a1", "b1"], id="label"),
        pytest.param({"label_selector": "!app"}, ["a2", "free"], id="label-absent"),
    ],
)
def test_selectors(
    apiserver: FakeKubeApiServer, core: client.CoreV1Api, selector: dict[str, str], names: list[str]
) -> None:
    apiserver.add_pod("a1", labels={"app": "x"})
    apiserver.add_pod("a2", phase="Running")
    apiserver.add_pod("b1", node="node-b", labels={"app": "x"})
    apiserver.add_pod("free", node=None)
    assert [p["metadata"]["name"] for p in _raw_list(core, **selector)["items"]] == names


def test_unsupported_field_selector_is_a_400(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as info:
        core.list_pod_for_all_namespaces(field_selector="spec.hostname=x")
    assert info.value.status == 400
    assert _status(info.value)["message"] == "field label not supported: spec.hostname"


def test_exact_list_shows_the_past_until_compacted(apiserver: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    apiserver.add_pod("p1")
    then = apiserver.resource_version
    apiserver.delete_pod("default", "p1")
    apiserver.add_pod("p2")

    past = _raw_list(core, resource_version=str(then), resource_version_match="Exact")
    assert [p["metadata"]["name"] for p in past["items"]] == ["p1"]
    assert past["metadata"]["resourceVersion"] == str(then)

    apiserver.compact()
    with pytest.raises(ApiException) as info:
        core.list_pod_for_all_namespaces(resource_version=str(then), resource_version_match="Exact")
    assert info.value.status == 410
    assert _status(info.value)["reason"] == "Expired"


def test_the_history_is_bounded_and_what_it_dropped_is_410(
    apiserver: FakeKubeApiServer, core: client.CoreV1Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubeapi_store, "HISTORY_LIMIT", 8)
    apiserver.add_pod("p1")
    first = apiserver.resource_version
    for phase in ("Pending", "Running") * 10:
        apiserver.modify_pod("default", "p1", phase=phase)
    assert len(apiserver._history) <= 8  # the table the watches read
    with pytest.raises(ApiException) as info:
        core.list_pod_for_all_namespaces(resource_version=str(first), resource_version_match="Exact")
    assert info.value.status == 410
    stream = watch.Watch()  # type: ignore[no-untyped-call]
    with pytest.raises(ApiException) as expired:
        for _ in stream.stream(core.list_pod_for_all_namespaces, resource_version=str(first), timeout_seconds=5):
            pass
    assert expired.value.status == 410
    recent = apiserver.resource_version - 1  # still in the history
    past = _raw_list(core, resource_version=str(recent), resource_version_match="Exact")
    assert [p["status"]["phase"] for p in past["items"]] == ["Pending"]


def test_not_older_than_a_future_version_is_a_504(apiserver: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as info:
        core.list_pod_for_all_namespaces(
            resource_version=str(apiserver.resource_version + 5), resource_version_match="NotOlderThan"
        )
    assert info.value.status == 504
    assert _status(info.value)["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


def test_watch_from_a_compacted_version_gets_an_error_event_with_410(
    apiserver: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    apiserver.add_pod("p1")
    old = apiserver.resource_version
    apiserver.add_pod("p2")
    apiserver.compact()
    stream = watch.Watch()  # type: ignore[no-untyped-call]
    with pytest.raises(ApiException) as info:
        for _ in stream.stream(core.list_pod_for_all_namespaces, resource_version=str(old), timeout_seconds=5):
            pass
    assert info.value.status == 410
    assert "too old resource version" in str(info.value.reason)


def test_watch_without_version_starts_with_synthetic_adds_then_streams(
    apiserver: FakeKubeApiServer, core: client.CoreV1Api
) -> None:
    apiserver.add_pod("p1")
    stream = watch.Watch()  # type: ignore[no-untyped-call]
    seen: list[tuple[str, str]] = []
    for event in stream.stream(core.list_pod_for_all_namespaces, timeout_seconds=5):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 1:
            apiserver.modify_pod("default", "p1", phase="Running")
            apiserver.delete_pod("default", "p1")
        if len(seen) == 3:
            stream.stop()  # type: ignore[no-untyped-call]
    assert seen == [("ADDED", "p1"), ("MODIFIED", "p1"), ("DELETED", "p1")]


def test_watch_ends_cleanly_after_timeout_seconds(apiserver: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    stream = watch.Watch()  # type: ignore[no-untyped-call]
    events = list(
        stream.stream(
            core.list_pod_for_all_namespaces, resource_version=str(apiserver.resource_version), timeout_seconds=1
        )
    )
    assert events == []


def test_nodes_get_and_not_found(apiserver: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    apiserver.add_node("node-a", labels={"example.com/fpga-platform": "pac-a10"})
    node = core.read_node("node-a")
    assert node.metadata.labels["example.com/fpga-platform"] == "pac-a10"
    with pytest.raises(ApiException) as info:
        core.read_node("node-z")
    assert info.value.status == 404
    assert _status(info.value)["reason"] == "NotFound"


ANNOTATION = "example.com/fpga-slots"


def _strategic(core: client.CoreV1Api) -> Any:
    return core.patch_node("node-a", {"metadata": {"annotations": {ANNOTATION: "[]", "old": None}}})


def _merge(core: client.CoreV1Api) -> Any:
    return core.patch_node(
        "node-a",
        {"metadata": {"annotations": {ANNOTATION: "[]", "old": None}}},
        _content_type="application/merge-patch+json",
    )


def _json_patch(core: client.CoreV1Api) -> Any:
    return core.patch_node(
        "node-a",
        [
            {"op": "test", "path": "/metadata/annotations/old", "value": "1"},
            {"op": "add", "path": "/metadata/annotations/example.com~1fpga-slots", "value": "[]"},
            {"op": "remove", "path": "/metadata/annotations/old"},
        ],
        _content_type="application/json-patch+json",
    )


@pytest.mark.parametrize(
    ("patch", "content_type"),
    [
        pytest.param(_strategic, "application/strategic-merge-patch+json", id="strategic-merge"),
        pytest.param(_merge, "application/merge-patch+json", id="merge"),
        pytest.param(_json_patch, "application/json-patch+json", id="json-patch"),
    ],
)
def test_node_patches(
    apiserver: FakeKubeApiServer,
    core: client.CoreV1Api,
    patch: Callable[[client.CoreV1Api], Any],
    content_type: str,
) -> None:
    apiserver.add_node("node-a", annotations={"old": "1", "keep": "yes"})
    before = apiserver.resource_version
    patched = patch(core)
    assert patched.metadata.annotations[ANNOTATION] == "[]"
    node = apiserver.node("node-a")
    assert node is not None
    assert node["metadata"]["annotations"][ANNOTATION] == "[]"
    assert node["metadata"]["annotations"]["keep"] == "yes"
    assert "old" not in node["metadata"]["annotations"]
    assert int(node["metadata"]["resourceVersion"]) == before + 1
    [request] = apiserver.requests("PATCH", "/api/v1/nodes/node-a")
    assert request.headers["content-type"] == content_type


def test_strategic_merge_patch_merges_conditions_by_type(apiserver: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    apiserver.add_node("node-a")
    core.patch_node("node-a", {"status": {"conditions": [{"type": "FpgaReady", "status": "True"}]}})
    node = apiserver.node("node-a")
    assert node is not None
    assert [c["type"] for c in node["status"]["conditions"]] == ["Ready", "FpgaReady"]


@pytest.mark.parametrize(
    ("body", "content_type", "code", "reason"),
    [
        pytest.param(
            {"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}},
            "application/merge-patch+json",
            409,
            "Conflict",
            id="stale-resource-version",
        ),
        pytest.param({"metadata": {"labels": {"a": "b"}}}, "application/apply-patch+yaml", 415, None, id="apply"),
        pytest.param(
            [{"op": "test", "path": "/metadata/name", "value": "other"}],
            "application/json-patch+json",
            422,
            "Invalid",
            id="failed-test-op",
        ),
    ],
)
def test_node_patch_errors_are_status_objects(
    apiserver: FakeKubeApiServer,
    core: client.CoreV1Api,
    body: Any,
    content_type: str,
    code: int,
    reason: str | None,
) -> None:
    apiserver.add_node("node-a")
    with pytest.raises(ApiException) as info:
        core.patch_node("node-a", body, _content_type=content_type)
    assert info.value.status == code
    status = _status(info.value)
    assert status["kind"] == "Status"
    assert status["code"] == code
    if reason:
        assert status["reason"] == reason


def _event(name: str, namespace: str = "default", **changes: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {"kind": "Pod", "namespace": namespace, "name": "p"},
        "reason": "Programmed",
        "message": "m",
        "type": "Normal",
        "source": {"component": "fpga-slot", "host": "node-a"},
        "count": 1,
    }
    event.update(changes)
    return event


@pytest.mark.parametrize(
    ("namespace", "body", "code", "reason", "text"),
    [
        pytest.param("default", _event("p.1", involvedObject={"kind": "Pod", "name": "p", "namespace": "ml"}),
                     422, "Invalid", "does not match event.namespace", id="involved-namespace"),
        pytest.param("default", _event("P.1"), 422, "Invalid", "metadata.name", id="bad-name"),
        pytest.param("default", _event("", reason=""), 422, "Invalid", "reason: Required value", id="required"),
        pytest.param("default", _event("p.1", eventTime="2025-01-01T00:00:00.000000Z"), 422, "Invalid",
                     "reportingInstance", id="new-style-needs-reporting"),
        pytest.param("default", _event("p.1", type="Info"), 422, "Invalid", "type", id="bad-type"),
        pytest.param("default", _event("p.1", namespace="other"), 400, "BadRequest",
                     "does not match the namespace", id="namespace-mismatch"),
        pytest.param("missing", _event("p.1", namespace="missing"), 404, "NotFound", 'namespaces "missing"',
                     id="no-namespace"),
    ],
)  # fmt: skip
def test_invalid_events_are_refused_as_the_api_server_does(
    core: client.CoreV1Api, namespace: str, body: dict[str, Any], code: int, reason: str, text: str
) -> None:
    with pytest.raises(ApiException) as info:
        core.create_namespaced_event(namespace, body)
    assert info.value.status == code
    status = _status(info.value)
    assert status["reason"] == reason
    assert text in status["message"]


def test_a_duplicate_event_name_is_409_already_exists(apiserver: FakeKubeApiServer, core: client.CoreV1Api) -> None:
    created = core.create_namespaced_event("default", _event("p.1"))
    assert created.metadata.uid
    with pytest.raises(ApiException) as info:
        core.create_namespaced_event("default", _event("p.1"))
    assert info.value.status == 409
    assert _status(info.value)["reason"] == "AlreadyExists"
    assert len(apiserver.events()) == 1


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [
        pytest.param("GET", "/api/v1/configmaps", 404, id="unknown-resource"),
        pytest.param("DELETE", "/api/v1/nodes/node-a", 405, id="method-not-allowed"),
        pytest.param("GET", "/api/v1/namespaces/default/nodes", 404, id="cluster-scoped-in-namespace"),
    ],
)
def test_unknown_requests_get_status_errors(apiserver: FakeKubeApiServer, method: str, path: str, code: int) -> None:
    apiserver.add_node("node-a")
    pool = urllib3.PoolManager()
    try:
        response = pool.request(method, apiserver.url + path, headers={"Authorization": f"Bearer {apiserver.token}"})
    finally:
        pool.clear()
    assert response.status == code
    status = response.json()
    assert (status["kind"], status["code"]) == ("Status", code)
