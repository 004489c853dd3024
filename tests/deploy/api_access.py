"""Every API server request fpga-slot makes, by who makes it: the source of the RBAC rules.

Each component's ClusterRole grants exactly its rules here; a rule with a ``namespace`` is granted by a
Role there. ``tests/deploy/test_rbac.py`` checks this table against the calls in ``agent.kube``'s source
and against the manifests, so a new API call must be listed here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: Who makes the request: the node agent, the scheduler extender, the ``fpga-agent certs`` Job, the
#: ``fpga-agent cleanup-grant`` Job, or a person with their own kubeconfig (``fpga-agent cluster``).
Component = Literal["agent", "extender", "certs", "grant", "operator"]


@dataclass(frozen=True, slots=True)
class ApiAccess:
    """The requests one class or function of ``agent.kube`` makes."""

    #: ``<module>.<class or function>`` inside ``agent.kube``
    owner: str
    component: Component
    #: API group; "" is the core group
    group: str
    #: plural resource, with ``/<subresource>`` where one is used
    resource: str
    verbs: frozenset[str]
    why: str
    #: "" for a cluster-wide grant (the component's ClusterRole); else the namespace whose Role grants it
    namespace: str = ""
    #: the objects the grant is limited to (RBAC resourceNames); () for any
    names: tuple[str, ...] = ()
    #: "" for a request; else the (resource, verb) of the owner's request on which the API server checks this
    checked_on: str = ""


API_ACCESS: tuple[ApiAccess, ...] = (
    ApiAccess(
        "pods.PodCache",
        "agent",
        "",
        "pods",
        frozenset({"list", "watch"}),
        "this node's pods (field selector spec.nodeName): bitstream annotations, pending pods, deletions",
    ),
    ApiAccess(
        "events.EventRecorder",
        "agent",
        "",
        "events",
        frozenset({"create"}),
        "Events on pods: programmed, cache hit, rejected, failed",
    ),
    ApiAccess(
        "nodes.NodePublisher",
        "agent",
        "",
        "nodes",
        frozenset({"get", "patch"}),
        "the platform labels on the agent's own Node (and the annotations earlier versions left there, removed)",
    ),
    ApiAccess(
        "nodes.NodePublisher",
        "agent",
        "example.com",
        "fpganodestates",
        frozenset({"get", "create", "update", "delete"}),
        "the node's slot state as its FpgaNodeState, in the agent's own namespace (delete: on an uninstall's "
        "clean stop, and so that its owner may be replaced)",
        namespace="fpga-slot",
    ),
    ApiAccess(
        "nodes.NodePublisher",
        "agent",
        "",
        "pods",
        frozenset({"get"}),
        "the agent's own pod: the DaemonSet that owns the node's FpgaNodeState",
    ),
    ApiAccess(
        "resourceslices.ResourceSlicePublisher",
        "agent",
        "resource.k8s.io",
        "resourceslices",
        frozenset({"get", "create", "update", "delete"}),
        "DRA: this node's slots as its ResourceSlice, put back after the kubelet wipes it (and the slice of the "
        "counters whole cards share, deleted when no card is offered)",
    ),
    ApiAccess(
        "resourceslices.ResourceSlicePublisher",
        "agent",
        "",
        "nodes",
        frozenset({"get"}),
        "DRA: the Node's UID, which owns the node's ResourceSlice",
    ),
    ApiAccess(
        "claims.ClaimReader",
        "agent",
        "resource.k8s.io",
        "resourceclaims",
        frozenset({"get"}),
        "DRA: a claim's allocated slots and configuration, at NodePrepareResources; and, for "
        "claims.ClaimStatusWriter, the claim as it is, whose status.devices the patch then changes (guarded by "
        "its resourceVersion)",
    ),
    ApiAccess(
        "claims.ClaimStatusWriter",
        "agent",
        "resource.k8s.io",
        "resourceclaims/status",
        frozenset({"patch"}),
        "DRA: what a claim's slots hold (and, with binding conditions, whether they are ready) in its "
        "status.devices, by JSON patch",
    ),
    ApiAccess(
        "claims.ClaimStatusWriter",
        "agent",
        "resource.k8s.io",
        "resourceclaims/driver",
        frozenset({"associated-node:patch"}),
        "DRA: the API server's check on a status.devices write (DRAResourceClaimGranularStatusAuthorization): "
        "only our driver's entries, only of claims allocated to the node the agent's pod (its token) is bound to",
        names=("fpga.example.com",),
        checked_on="resourceclaims/status patch",
    ),
    ApiAccess(
        "reflector.Watcher",
        "agent",
        "resource.k8s.io",
        "resourceclaims",
        frozenset({"list", "watch"}),
        "DRA with binding conditions: the claims allocated to this node's pool, programmed before their pod binds "
        "(RBAC cannot narrow this to one node's claims)",
    ),
    ApiAccess(
        "reflector.Watcher",
        "agent",
        "example.com",
        "fpgabitstreams",
        frozenset({"list", "watch"}),
        "the bitstreams the cluster declares (FpgaBitstream), which the agent pulls on demand",
    ),
    ApiAccess(
        "reflector.Watcher",
        "extender",
        "example.com",
        "fpgabitstreams",
        frozenset({"list", "watch"}),
        "the declared bitstreams, which nodes lacking the file can pull: scored below nodes that have it",
    ),
    ApiAccess(
        "secrets.SecretReader",
        "agent",
        "",
        "secrets",
        frozenset({"get"}),
        "the pull Secret an FpgaBitstream names, in the agent's own namespace only",
        namespace="fpga-slot",
    ),
    ApiAccess(
        "secrets.SecretReader",
        "certs",
        "",
        "secrets",
        frozenset({"get"}),
        "fpga-agent certs: whether the extender's TLS Secrets exist (then they are left as they are)",
        namespace="fpga-slot",
        names=("fpga-slot-extender-tls", "fpga-scheduler-extender-client"),
    ),
    ApiAccess(
        "secrets.SecretWriter",
        "certs",
        "",
        "secrets",
        frozenset({"create"}),
        "fpga-agent certs: the extender's TLS Secrets, when neither exists (RBAC cannot limit create to names)",
        namespace="fpga-slot",
    ),
    ApiAccess(
        "webhooks.fill_ca_bundle",
        "certs",
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        frozenset({"get", "patch"}),
        "fpga-agent certs --webhook-configuration (DRA mode): the install's CA into the bitstream webhook's "
        "caBundle (a ClusterRole of daemonset/dra-mode, limited to that configuration)",
        names=("fpga-slot-bitstreams",),
    ),
    ApiAccess(
        "uninstall.successor_expected",
        "agent",
        "",
        "pods",
        frozenset({"get"}),
        "the agent's own pod on a clean stop: which DaemonSet runs it (cluster-wide, as the cleanup grant must "
        "hold it, and no more than the pods list the agent has anyway)",
    ),
    ApiAccess(
        "uninstall.successor_expected",
        "agent",
        "apps",
        "daemonsets",
        frozenset({"get"}),
        "that DaemonSet on a clean stop: gone or being deleted means uninstalled, so the Node's slot state goes",
        names=("fpga-slot-agent",),
    ),
    ApiAccess(
        "uninstall.node_with_state",
        "agent",
        "",
        "nodes",
        frozenset({"list"}),
        "after an uninstall cleared its Node: whether any Node still carries slot state (pages, first hit ends it)",
    ),
    ApiAccess(
        "uninstall.release_account",
        "agent",
        "",
        "serviceaccounts",
        frozenset({"get", "patch"}),
        "the finalizer that keeps the agent's ServiceAccount (and namespace) until the last Node is clean",
        names=("fpga-slot-agent",),
    ),
    ApiAccess(
        "cleanupgrant.ensure_cleanup_grant",
        "grant",
        "",
        "namespaces",
        frozenset({"get"}),
        "fpga-agent cleanup-grant: the UID of the Namespace that owns the grant (removed with the namespace)",
        names=("fpga-slot",),
    ),
    ApiAccess(
        "cleanupgrant.ensure_cleanup_grant",
        "grant",
        "rbac.authorization.k8s.io",
        "clusterroles",
        frozenset({"create"}),
        "fpga-agent cleanup-grant: the grant's ClusterRole, when missing (only with rules the Job holds itself)",
    ),
    ApiAccess(
        "cleanupgrant.ensure_cleanup_grant",
        "grant",
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        frozenset({"create"}),
        "fpga-agent cleanup-grant: the grant's binding to the agent's ServiceAccount, when missing (RBAC cannot "
        "limit create to names)",
    ),
    ApiAccess(
        "reflector.Watcher",
        "extender",
        "resource.k8s.io",
        "resourceclaimtemplates",
        frozenset({"list", "watch"}),
        "DRA: the bitstream and slot count of the claims a DRA pod names, for scoring it",
    ),
    ApiAccess(
        "uninstall.clear_every_node",
        "operator",
        "",
        "nodes",
        frozenset({"list", "patch"}),
        "fpga-agent uninstall: the agent's keys on every Node that still has them (then, as the agent does, "
        "uninstall.release_account: get and patch on the ServiceAccount fpga-slot-agent)",
    ),
    ApiAccess(
        "nodes.list_nodes",
        "operator",
        "",
        "nodes",
        frozenset({"list"}),
        "fpga-agent cluster: every node and its platform labels",
    ),
    ApiAccess(
        "nodes.list_node_states",
        "operator",
        "example.com",
        "fpganodestates",
        frozenset({"list"}),
        "fpga-agent cluster: the slot map of every node",
    ),
    ApiAccess(
        "nodes.list_resource_claims",
        "operator",
        "resource.k8s.io",
        "resourceclaims",
        frozenset({"list"}),
        "fpga-agent cluster --claims: what each DRA claim's slots hold (its status.devices data)",
    ),
    ApiAccess(
        "reflector.Watcher",
        "extender",
        "example.com",
        "fpganodestates",
        frozenset({"list", "watch"}),
        "every node's published slot state (FpgaNodeState), for scoring by name",
    ),
)
