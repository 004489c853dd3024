"""Whether the agent's stop is an uninstall (its DaemonSet is gone) or an update (a successor follows); the
uninstall's clean-up of Nodes and of the ServiceAccount's finalizer. See docs/uninstall.md."""

from __future__ import annotations

from kubernetes.client import ApiClient

from agent.errors import KubeError
from agent.kube.cleanupgrant import ACCOUNT, FINALIZER, REQUEST_TIMEOUT_S
from agent.kube.client import api_status, describe_api_error
from agent.kube.core import CoreCalls, list_pages
from agent.kube.nodefields import OwnedFields, as_mapping, keys_of, owned_fields, patch_body
from agent.kube.nodes import controller_daemonset


def successor_expected(
    api_client: ApiClient, namespace: str, pod_name: str, daemonset: str | None = None
) -> tuple[bool, str]:
    """(whether another agent pod will take over this node, why); KubeError when that cannot be read.
    ``daemonset``: the agent's DaemonSet as learnt at start, used when its pod is gone already."""
    if not pod_name:
        return False, "the agent does not run in a pod"
    calls = CoreCalls(api_client)
    try:
        ref = controller_daemonset(calls.read_namespaced_pod(pod_name, namespace, _request_timeout=REQUEST_TIMEOUT_S))
        owner = ref.get("name") if ref is not None and isinstance(ref.get("name"), str) else None
    except Exception as exc:
        if api_status(exc) != 404:
            raise KubeError(
                f"cannot read the agent's pod {namespace}/{pod_name}: {describe_api_error(exc)[1]}"
            ) from exc
        if daemonset is None:
            return False, f"its pod {namespace}/{pod_name} is gone"
        owner = daemonset
    if owner is None:
        return False, f"its pod {namespace}/{pod_name} belongs to no DaemonSet"
    try:
        found = calls.read_namespaced_daemon_set(owner, namespace, _request_timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:
        if api_status(exc) == 404:
            return False, f"DaemonSet {namespace}/{owner} is gone"
        raise KubeError(f"cannot read DaemonSet {namespace}/{owner}: {describe_api_error(exc)[1]}") from exc
    if as_mapping(found.get("metadata")).get("deletionTimestamp"):
        return False, f"DaemonSet {namespace}/{owner} is being deleted"
    return True, f"DaemonSet {namespace}/{owner} starts the next agent pod here"


def node_with_state(api_client: ApiClient, *, page_size: int = 500) -> str | None:
    """The name of a Node that still carries slot state, heartbeat or platform labels (stops at the first);
    None when none does. KubeError when they cannot be listed."""
    calls = CoreCalls(api_client)
    for item in list_pages(calls.list_node, "cannot list nodes", REQUEST_TIMEOUT_S, page_size):
        owned = owned_fields(item)
        if owned.annotations or owned.labels:
            return str(as_mapping(item.get("metadata")).get("name") or "?")
    return None


def clear_every_node(api_client: ApiClient) -> dict[str, list[str]]:
    """Remove the agent's keys from every Node that has them: Node name -> the keys removed. Blocking;
    KubeError naming the Node (or the list) that failed."""
    calls = CoreCalls(api_client)
    cleared: dict[str, list[str]] = {}
    for item in list_pages(calls.list_node, "cannot list nodes", REQUEST_TIMEOUT_S):
        name = str(as_mapping(item.get("metadata")).get("name") or "")
        body = patch_body(OwnedFields(), owned_fields(item))
        if body is None or not name:
            continue
        try:
            calls.patch_node(name, body, _request_timeout=REQUEST_TIMEOUT_S)
        except Exception as exc:
            if api_status(exc) == 404:  # deleted meanwhile: nothing left on it
                continue
            raise KubeError(f"cannot clear node {name}: {describe_api_error(exc)[1]}") from exc
        cleared[name] = sorted(keys_of(body))
    return cleared


def release_account(api_client: ApiClient, namespace: str, account: str = ACCOUNT) -> bool:
    """Remove :data:`FINALIZER` from the agent's ServiceAccount (a JSON patch that tests its position, read again
    when the list changed); False when it was not there (or the account is gone). Blocking; KubeError."""
    calls = CoreCalls(api_client)
    for _attempt in range(3):
        try:
            found = calls.read_namespaced_service_account(account, namespace, _request_timeout=REQUEST_TIMEOUT_S)
        except Exception as exc:
            if api_status(exc) == 404:
                return False
            raise KubeError(f"cannot read ServiceAccount {namespace}/{account}: {describe_api_error(exc)[1]}") from exc
        finalizers = list(as_mapping(as_mapping(found).get("metadata")).get("finalizers") or [])
        if FINALIZER not in finalizers:
            return False
        index = finalizers.index(FINALIZER)
        body = [
            {"op": "test", "path": f"/metadata/finalizers/{index}", "value": FINALIZER},
            {"op": "remove", "path": f"/metadata/finalizers/{index}"},
        ]
        try:
            calls.patch_namespaced_service_account(account, namespace, body, _request_timeout=REQUEST_TIMEOUT_S)
        except Exception as exc:
            status = api_status(exc)
            if status == 404:
                return False
            if status in (409, 422):  # the list changed under us: read it again
                continue
            raise KubeError(
                f"cannot remove finalizer {FINALIZER} from ServiceAccount {namespace}/{account}: "
                f"{describe_api_error(exc)[1]}"
            ) from exc
        return True
    raise KubeError(f"ServiceAccount {namespace}/{account} kept changing while its finalizer was being removed")
