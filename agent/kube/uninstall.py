"""Whether the agent's stop is an uninstall (its DaemonSet is gone) or an update (a successor follows).

On a clean stop the agent removes its slot state, heartbeat and platform labels from
its Node only when no agent pod will follow on this node: otherwise the node would
look empty until the successor publishes again, and with an overlapping successor
(``maxSurge``) the stop could even remove what the successor has just written.

* The pod's controller is a DaemonSet that still exists and is not being deleted: an
  update, a restart or a deleted pod; the DaemonSet puts a pod back on the node, which
  publishes again. The state stays.
* The DaemonSet is gone or being deleted (``kubectl delete -k``, deleting the
  DaemonSet): nothing follows. The state goes.
* The agent does not run in a pod (``pod_name`` empty: a process on the host): nothing
  follows that the agent knows of. The state goes.

The calls are ``get`` on the agent's own pod and on DaemonSets in its namespace. When
they fail (an uninstall may already have removed the agent's RBAC), nothing can be
removed either: the readers' heartbeat check is then what hides the state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes.client import ApiClient

from agent.errors import KubeError
from agent.kube.client import api_status, describe_api_error
from agent.kube.core import CoreCalls

REQUEST_TIMEOUT_S = 5.0


def successor_expected(api_client: ApiClient, namespace: str, pod_name: str) -> tuple[bool, str]:
    """(whether another agent pod will take over this node, why); KubeError when that cannot be read."""
    if not pod_name:
        return False, "the agent does not run in a pod"
    calls = CoreCalls(api_client)
    try:
        pod = calls.read_namespaced_pod(pod_name, namespace, _request_timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:
        if api_status(exc) == 404:
            return False, f"its pod {namespace}/{pod_name} is gone"
        raise KubeError(f"cannot read the agent's pod {namespace}/{pod_name}: {describe_api_error(exc)[1]}") from exc
    owner = _daemonset_owner(pod)
    if owner is None:
        return False, f"its pod {namespace}/{pod_name} belongs to no DaemonSet"
    try:
        daemonset = calls.read_namespaced_daemon_set(owner, namespace, _request_timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:
        if api_status(exc) == 404:
            return False, f"DaemonSet {namespace}/{owner} is gone"
        raise KubeError(f"cannot read DaemonSet {namespace}/{owner}: {describe_api_error(exc)[1]}") from exc
    if _mapping(daemonset.get("metadata")).get("deletionTimestamp"):
        return False, f"DaemonSet {namespace}/{owner} is being deleted"
    return True, f"DaemonSet {namespace}/{owner} starts the next agent pod here"


def _daemonset_owner(pod: Mapping[str, Any]) -> str | None:
    for ref in _mapping(pod.get("metadata")).get("ownerReferences") or []:
        ref = _mapping(ref)
        if ref.get("kind") == "DaemonSet" and ref.get("controller") and isinstance(ref.get("name"), str):
            return str(ref["name"])
    return None


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
