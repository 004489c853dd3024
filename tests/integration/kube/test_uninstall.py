"""The pieces of a one-step uninstall over real HTTP: the cleanup grant the install's Job makes, the search for a
Node that still carries slot state, and the release of the ServiceAccount's finalizer."""

from __future__ import annotations

import pytest
from kubernetes import client

from agent.errors import KubeError
from agent.kube.cleanupgrant import ACCOUNT, FINALIZER, GRANT_RULES, ensure_cleanup_grant, grant_name
from agent.kube.nodefields import PLATFORM_LABEL_PREFIX
from agent.kube.uninstall import node_with_state, release_account
from tests.fakeapi import FakeKubeApiServer

#: Slot state annotations an earlier version kept on its Node (the uninstall still removes them).
SLOTS_ANNOTATION = "example.com/fpga-slots"

NAMESPACE = "fpga-slot"
OTHER = "example.com/other-cleanup"


def test_the_grant_is_made_once_owned_by_the_namespace(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.namespaces.add(NAMESPACE)
    assert ensure_cleanup_grant(api_client, NAMESPACE) is True
    grant = grant_name(apiserver.namespace_uid(NAMESPACE))
    role = apiserver.cluster_object("clusterroles", grant)
    binding = apiserver.cluster_object("clusterrolebindings", grant)
    assert role is not None
    assert binding is not None
    owners = {(o["kind"], o["name"]) for obj in (role, binding) for o in obj["metadata"]["ownerReferences"]}
    assert owners == {("Namespace", NAMESPACE)}
    uids = {o["uid"] for obj in (role, binding) for o in obj["metadata"]["ownerReferences"]}
    assert len(uids) == 1
    assert all(uids)
    assert role["rules"] == [dict(rule) for rule in GRANT_RULES]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]
    assert binding["roleRef"]["name"] == grant
    # The Job run again (the next `kubectl apply -k`) finds them there: 409, nothing changed.
    versions = (role["metadata"]["resourceVersion"], binding["metadata"]["resourceVersion"])
    assert ensure_cleanup_grant(api_client, NAMESPACE) is False
    role, binding = (
        apiserver.cluster_object("clusterroles", grant),
        apiserver.cluster_object("clusterrolebindings", grant),
    )
    assert role is not None
    assert binding is not None
    assert (role["metadata"]["resourceVersion"], binding["metadata"]["resourceVersion"]) == versions


@pytest.mark.parametrize(
    ("failing", "message"),
    [
        ("/api/v1/namespaces/fpga-slot", "cannot read namespace fpga-slot"),
        ("/apis/rbac.authorization.k8s.io/v1/clusterroles", "cannot create ClusterRole fpga-slot-agent-cleanup-"),
    ],
    ids=["namespace-unreadable", "create-forbidden"],
)
def test_a_refused_grant_is_an_error_naming_the_call(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient, failing: str, message: str
) -> None:
    apiserver.namespaces.add(NAMESPACE)
    method = "GET" if failing.endswith(NAMESPACE) else "POST"
    apiserver.fail_next(method, failing, 403, message="forbidden by the test")
    with pytest.raises(KubeError, match=message):
        ensure_cleanup_grant(api_client, NAMESPACE)
    assert apiserver.cluster_object("clusterrolebindings", grant_name(apiserver.namespace_uid(NAMESPACE))) is None


@pytest.mark.parametrize("page_size", [1, 2, 500], ids=["pages-of-1", "pages-of-2", "one-page"])
def test_the_node_with_state_is_found_on_any_page(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient, page_size: int
) -> None:
    for name in ("n1", "n2", "n3"):
        apiserver.add_node(name, labels={"team": "fpga"}, annotations={"owner": "ops"})
    assert node_with_state(api_client, page_size=page_size) is None
    apiserver.add_node("n4", labels={PLATFORM_LABEL_PREFIX + "sim-pr-v1": "true"})
    assert node_with_state(api_client, page_size=page_size) == "n4"
    apiserver.add_node("n2", annotations={SLOTS_ANNOTATION: "[]"})
    assert node_with_state(api_client, page_size=page_size) == "n2"


def test_the_search_stops_at_the_first_node_with_state(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.add_node("n1", annotations={SLOTS_ANNOTATION: "[]"})
    for name in ("n2", "n3", "n4"):
        apiserver.add_node(name)
    assert node_with_state(api_client, page_size=1) == "n1"
    assert len(apiserver.list_requests("nodes")) == 1


def test_nodes_that_cannot_be_listed_are_an_error(apiserver: FakeKubeApiServer, api_client: client.ApiClient) -> None:
    apiserver.fail_next("GET", "/api/v1/nodes", 401, message="token expired")
    with pytest.raises(KubeError, match=r"cannot list nodes: .*token expired"):
        node_with_state(api_client)


def test_releasing_removes_only_the_agents_finalizer_and_a_deleted_account_goes(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.put_service_account(NAMESPACE, ACCOUNT, finalizers=[OTHER, FINALIZER])
    assert release_account(api_client, NAMESPACE) is True
    account = apiserver.service_account(NAMESPACE, ACCOUNT)
    assert account is not None
    assert account["metadata"]["finalizers"] == [OTHER]
    assert release_account(api_client, NAMESPACE) is False  # idempotent: nothing left to release
    apiserver.put_service_account(NAMESPACE, ACCOUNT, finalizers=[FINALIZER], deleting=True)
    assert release_account(api_client, NAMESPACE) is True
    assert apiserver.service_account(NAMESPACE, ACCOUNT) is None  # its deletion completes
    assert release_account(api_client, NAMESPACE) is False  # gone: nothing to do


def test_a_finalizer_list_changed_meanwhile_is_read_again(
    apiserver: FakeKubeApiServer, api_client: client.ApiClient
) -> None:
    """Another agent (or a person) changed the list between the read and the patch: the test operation fails (422),
    the list is read again, and the right entry goes."""
    apiserver.put_service_account(NAMESPACE, ACCOUNT, finalizers=[OTHER, FINALIZER], deleting=True)
    path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{ACCOUNT}"
    apiserver.fail_next("PATCH", path, 422, message="the server rejected our request due to an error in our request")
    assert release_account(api_client, NAMESPACE) is True
    account = apiserver.service_account(NAMESPACE, ACCOUNT)
    assert account is not None
    assert account["metadata"]["finalizers"] == [OTHER]
    assert len(apiserver.requests("PATCH", path)) == 2


def test_a_refused_release_is_an_error(apiserver: FakeKubeApiServer, api_client: client.ApiClient) -> None:
    apiserver.put_service_account(NAMESPACE, ACCOUNT, finalizers=[FINALIZER], deleting=True)
    path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{ACCOUNT}"
    apiserver.fail_next("PATCH", path, 403, message="forbidden by the test")
    with pytest.raises(KubeError, match=f"cannot remove finalizer {FINALIZER}"):
        release_account(api_client, NAMESPACE)
    account = apiserver.service_account(NAMESPACE, ACCOUNT)
    assert account is not None
    assert account["metadata"]["finalizers"] == [FINALIZER]
