"""The grant that outlives ``kubectl delete -k`` long enough for the agents to leave their Nodes clean.

``fpga-agent cleanup-grant`` makes a ClusterRole and ClusterRoleBinding owned by the Namespace (in no
manifest); the ServiceAccount's :data:`FINALIZER` holds the Namespace until the last agent has cleaned
up. See docs/uninstall.md.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client import ApiClient

from agent.errors import KubeError
from agent.kube.client import api_status, describe_api_error
from agent.kube.core import CoreCalls

logger = logging.getLogger(__name__)

#: The ClusterRole and ClusterRoleBinding of the grant: this and the UID of the Namespace.
GRANT_PREFIX = "fpga-slot-agent-cleanup-"
#: The finalizer on the agent's ServiceAccount (daemonset/agent-rbac.yaml).
FINALIZER = "fpga.example.com/node-cleanup"
#: The agent's ServiceAccount and DaemonSet (daemonset/agent-rbac.yaml, agent-daemonset.yaml).
ACCOUNT = "fpga-slot-agent"
DAEMONSET = "fpga-slot-agent"
#: Of each request here and of the clean-up (agent.kube.uninstall).
REQUEST_TIMEOUT_S = 5.0

#: What a clean stop that is an uninstall asks for (agent.kube.uninstall, NodePublisher.clear).
GRANT_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    {"apiGroups": ["apps"], "resources": ["daemonsets"], "resourceNames": [DAEMONSET], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch", "list"]},
    {"apiGroups": [""], "resources": ["serviceaccounts"], "resourceNames": [ACCOUNT], "verbs": ["get", "patch"]},
)
_LABELS = {"app.kubernetes.io/name": "fpga-slot", "app.kubernetes.io/component": "agent"}


def grant_name(namespace_uid: str) -> str:
    """The name of the ClusterRole and ClusterRoleBinding of the namespace with this UID."""
    return GRANT_PREFIX + namespace_uid


def grant_objects(namespace: str, namespace_uid: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ClusterRole and ClusterRoleBinding, owned by the Namespace ``namespace``."""
    owner = {"apiVersion": "v1", "kind": "Namespace", "name": namespace, "uid": namespace_uid}
    name = grant_name(namespace_uid)
    metadata = {"name": name, "labels": dict(_LABELS), "ownerReferences": [owner]}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": metadata,
        "rules": [dict(rule) for rule in GRANT_RULES],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {**metadata, "labels": dict(_LABELS), "ownerReferences": [dict(owner)]},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}],
    }
    return role, binding


def ensure_cleanup_grant(api_client: ApiClient, namespace: str) -> bool:
    """Make the grant unless it exists. True when something was made; KubeError naming the failed call. Blocking."""
    calls = CoreCalls(api_client)
    try:
        found = calls.read_namespace(namespace, _request_timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:
        raise KubeError(f"cannot read namespace {namespace}: {describe_api_error(exc)[1]}") from exc
    uid = str(((found or {}).get("metadata") or {}).get("uid") or "")
    if not uid:
        raise KubeError(f"namespace {namespace} has no UID in the API server's answer")
    role, binding = grant_objects(namespace, uid)
    made = False
    for kind, create, body in (
        ("ClusterRole", calls.create_cluster_role, role),
        ("ClusterRoleBinding", calls.create_cluster_role_binding, binding),
    ):
        try:
            create(body, _request_timeout=REQUEST_TIMEOUT_S)
        except Exception as exc:
            if api_status(exc) == 409:
                continue
            raise KubeError(f"cannot create {kind} {body['metadata']['name']}: {describe_api_error(exc)[1]}") from exc
        made = True
    return made
