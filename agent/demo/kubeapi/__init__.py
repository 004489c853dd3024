"""A small fake kube-apiserver at the HTTP level, for the real ``kubernetes`` client to talk to.

No API server can be installed here, and mocking the client's methods would test
nothing of what breaks in practice (serialisation, query parameters, chunked
watch streams, resourceVersion handling, error bodies). So this serves the few
endpoints the agent uses, over real HTTP on 127.0.0.1, with the behaviour of
the real server where the agent depends on it:

* ``GET /api/v1/pods``, ``/api/v1/namespaces/{ns}/pods``, ``/api/v1/nodes``,
  ``/api/v1/namespaces/{ns}/events``: lists with ``metadata.resourceVersion``
  (items without kind/apiVersion, as the server sends them), ``fieldSelector``
  (``=``, ``==``, ``!=``; unsupported fields are a 400 as on the real server) and
  equality/existence ``labelSelector``; ``resourceVersion`` with
  ``resourceVersionMatch`` ``NotOlderThan`` (504 when newer than the store) or
  ``Exact`` (the state at that version from history; 410 once compacted);
* the same paths with ``watch=true``: a chunked stream of JSON lines
  ``{"type": ..., "object": ...}``; without resourceVersion (or ``0``) it starts
  with synthetic ADDED events for what exists; from a resourceVersion it replays
  history after it, or sends an ERROR event with a ``410 Expired`` Status if
  that version was compacted; objects entering or leaving a selector show as
  ADDED/DELETED (a pod bound to the node appears as ADDED); ``timeoutSeconds``
  ends the stream cleanly; BOOKMARK events on request;
* ``GET /api/v1/namespaces/{ns}/secrets/{name}``: Secrets the test put (data base64-encoded);
  ``POST /api/v1/namespaces/{ns}/secrets``: created (name, namespace, base64 data and, for
  ``kubernetes.io/tls``, its two keys checked), 409 AlreadyExists when one of that name exists;
* ``GET /apis/apps/v1/namespaces/{ns}/daemonsets/{name}``: DaemonSets the test put (metadata only);
* ``GET /api/v1/namespaces/{name}`` (a UID that stays the same per name); ``GET`` and JSON ``PATCH``
  of ServiceAccounts the test put, with finalizers as the real server keeps them (none may be added
  to an object being deleted, 422; one being deleted goes when its last finalizer goes);
  ``POST`` of ClusterRoles and ClusterRoleBindings (409 AlreadyExists when one of that name exists);
* ``GET /apis/example.com/v1alpha1/fpgabitstreams`` (the FpgaBitstream custom resource,
  cluster-scoped): list and watch as above, objects put and deleted by the test;
* ``GET /apis/resource.k8s.io/v1/[namespaces/{ns}/]resourceclaimtemplates``: list and watch as
  above, and ``GET`` of one, of the templates the test put;
* ``GET``/``PATCH`` of one ValidatingWebhookConfiguration (``/apis/admissionregistration.k8s.io/v1``)
  the test put (``fpga-agent certs`` fills its caBundle);
* ``GET``/``PATCH`` of single pods and nodes: strategic merge patch, JSON merge
  patch, JSON patch; a ``metadata.resourceVersion`` in the patch is a
  precondition (409 Conflict);
* ``POST /api/v1/namespaces/{ns}/events``: validated (see :meth:`_validate_event`),
  stored, 201 with the stored object; 409 on a duplicate name, 404 for an unknown
  namespace;
* bearer-token authentication (401 without the kubeconfig's token);
* errors as ``Status`` objects with the real reasons and codes.

Test controls: pods and nodes are added, changed and deleted directly (each a
new resourceVersion that watchers see), watches can be expired (410), ended
cleanly or dropped (connection cut mid-stream), history compacted, faults
injected for the next requests, and every request is recorded. ``wait_for``
and ``until`` wait on a condition instead of sleeping.

Pagination: ``limit`` gives pages, ``continue`` the next (the token is an offset). Not emulated:
``sendInitialEvents``, server-side apply, ``$patch`` directives of strategic merge
patch (list merge keys are known by field name only, see ``_MERGE_KEYS`` in :mod:`.objects`), TLS,
and any resource not listed above.

Shipped (not only in tests) because ``fpga-agent demo dra`` runs the agent against it.
"""

from __future__ import annotations

from agent.demo.kubeapi.admission import claim_template_review
from agent.demo.kubeapi.objects import (
    DEFAULT_NODE,
    JSON,
    RESOURCE_API,
    SLOT_RESOURCE,
    ApiError,
    make_node,
    make_pod,
    make_resource_claim,
    now_rfc3339,
    status_object,
)
from agent.demo.kubeapi.server import FakeKubeApiServer, running_apiserver
from agent.demo.kubeapi.store import RecordedRequest

__all__ = [
    "DEFAULT_NODE",
    "JSON",
    "RESOURCE_API",
    "SLOT_RESOURCE",
    "ApiError",
    "FakeKubeApiServer",
    "RecordedRequest",
    "claim_template_review",
    "make_node",
    "make_pod",
    "make_resource_claim",
    "now_rfc3339",
    "running_apiserver",
    "status_object",
]
