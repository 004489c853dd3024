"""The cluster objects that ``fpga-agent certs``, ``cleanup-grant`` and ``uninstall`` read and write, served on
top of the API server stand-in for the tests: Secrets, DaemonSets, ServiceAccounts with their finalizers,
Namespaces (a UID per name), ClusterRoles and ClusterRoleBindings, ValidatingWebhookConfigurations."""

from __future__ import annotations

import base64
import copy
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from agent.demo.kubeapi.objects import JSON, PATH, RESOURCE_API, RESOURCES, ApiError, Kind, now_rfc3339
from agent.demo.kubeapi.store import RecordedRequest
from tests.fakeapi_requests import FullRequests
from tests.fakeapi_validation import DNS_SUBDOMAIN

_RBAC = "/apis/rbac.authorization.k8s.io/v1"


class ClusterObjects(FullRequests):
    """The stand-in with the cluster objects above: put and read by the test, created and patched by clients."""

    resources = {
        **RESOURCES,
        "secrets": Kind("Secret", True, "/api/v1", ("type",)),
        "daemonsets": Kind("DaemonSet", True, "/apis/apps/v1"),
        "resourceclaimtemplates": Kind("ResourceClaimTemplate", True, f"/apis/{RESOURCE_API}"),
        "validatingwebhookconfigurations": Kind(
            "ValidatingWebhookConfiguration", False, "/apis/admissionregistration.k8s.io/v1"
        ),
        "serviceaccounts": Kind("ServiceAccount", True, "/api/v1"),
        "namespaces": Kind("Namespace", False, "/api/v1", ("status.phase",)),
        "clusterroles": Kind("ClusterRole", False, _RBAC),
        "clusterrolebindings": Kind("ClusterRoleBinding", False, _RBAC),
    }

    def _route(self, request: RecordedRequest) -> tuple[int, JSON]:
        match = PATH.match(request.path)
        if not match or match["res"] not in self.resources:
            return super()._route(request)
        resource, namespace, name = match["res"], match["ns"], match["name"]
        if name is None and request.method == "POST":
            if resource == "secrets" and namespace is not None:
                self._check_scope(resource, namespace, match["api"])
                return 201, self._create_secret(namespace, request.body)
            if resource in ("clusterroles", "clusterrolebindings"):
                self._check_scope(resource, namespace, match["api"])
                return 201, self._create_cluster_object(resource, request.body)
        if name is not None and (request.method, resource) in (
            ("GET", "namespaces"),
            ("PATCH", "serviceaccounts"),
            ("PATCH", "validatingwebhookconfigurations"),
        ):
            self._check_scope(resource, namespace, match["api"])
            with self._cond:
                if resource == "namespaces":
                    return 200, self._namespace(name)
                return 200, self._patch(resource, (namespace or "", name), request)
        return super()._route(request)

    def put_validating_webhook_configuration(self, obj: JSON) -> JSON:
        """Create or replace a ValidatingWebhookConfiguration (cluster-scoped), as ``kubectl apply`` would."""
        obj = copy.deepcopy(obj)
        key = ("", obj["metadata"]["name"])
        with self._cond:
            current = self._objects["validatingwebhookconfigurations"].get(key)
            obj["metadata"]["uid"] = current["metadata"]["uid"] if current else str(uuid.uuid4())
            return self._store("validatingwebhookconfigurations", key, obj)

    def get_validating_webhook_configuration(self, name: str) -> JSON:
        with self._cond:
            return copy.deepcopy(self._get("validatingwebhookconfigurations", ("", name)))

    def put_secret(self, namespace: str, name: str, data: Mapping[str, bytes], secret_type: str = "Opaque") -> JSON:
        """Create or replace a Secret; ``data`` is stored base64-encoded, as the API server serves it."""
        encoded = {key: base64.b64encode(value).decode("ascii") for key, value in data.items()}
        obj: JSON = {"metadata": {"name": name, "namespace": namespace}, "type": secret_type, "data": encoded}
        with self._cond:
            return self._store("secrets", (namespace, name), obj)

    def secret(self, namespace: str, name: str) -> JSON | None:
        """A stored Secret as the server serves it (data base64-encoded), None when there is none."""
        with self._cond:
            found = self._objects["secrets"].get((namespace, name))
            return copy.deepcopy(found) if found else None

    def put_daemonset(self, namespace: str, name: str, *, deleting: bool = False) -> JSON:
        """Create or replace a DaemonSet (metadata only; ``deleting``: with a deletionTimestamp)."""
        meta: JSON = {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())}
        if deleting:
            meta["deletionTimestamp"] = now_rfc3339()
        with self._cond:
            self.namespaces.add(namespace)
            return self._store("daemonsets", (namespace, name), {"metadata": meta})

    def put_service_account(
        self, namespace: str, name: str, *, finalizers: Sequence[str] = (), deleting: bool = False
    ) -> JSON:
        """Create or replace a ServiceAccount (``deleting``: with a deletionTimestamp, kept by its finalizers)."""
        meta: JSON = {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()), "finalizers": list(finalizers)}
        if deleting:
            meta["deletionTimestamp"] = now_rfc3339()
        with self._cond:
            self.namespaces.add(namespace)
            return self._store("serviceaccounts", (namespace, name), {"metadata": meta})

    def service_account(self, namespace: str, name: str) -> JSON | None:
        with self._cond:
            found = self._objects["serviceaccounts"].get((namespace, name))
            return copy.deepcopy(found) if found else None

    def cluster_object(self, resource: str, name: str) -> JSON | None:
        """A stored ClusterRole or ClusterRoleBinding (``resource``: ``clusterroles``, ``clusterrolebindings``)."""
        with self._cond:
            found = self._objects[resource].get(("", name))
            return copy.deepcopy(found) if found else None

    @staticmethod
    def namespace_uid(name: str) -> str:
        """The UID the server gives the namespace ``name`` (the same for the same name)."""
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"fake-namespace/{name}"))

    def _namespace(self, name: str) -> JSON:
        """A namespace the server knows, with its UID (:meth:`namespace_uid`)."""
        if name not in self.namespaces:
            raise ApiError(404, f'namespaces "{name}" not found', details={"name": name, "kind": "namespaces"})
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "uid": self.namespace_uid(name)}}

    def _create_cluster_object(self, resource: str, body: Any) -> JSON:
        """A ClusterRole or ClusterRoleBinding made by a client: 409 AlreadyExists when one of that name exists."""
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
            raise ApiError(400, f"{self.resources[resource].kind}: the body has no metadata")
        obj = copy.deepcopy(body)
        name = obj["metadata"].get("name", "")
        if not isinstance(name, str) or not DNS_SUBDOMAIN.match(name):
            raise ApiError(422, f'{self.resources[resource].kind} "{name}" is invalid: metadata.name: Invalid value')
        with self._cond:
            return self._store_new_cluster_object(resource, name, obj)

    def _store_new_cluster_object(self, resource: str, name: str, obj: JSON) -> JSON:
        if ("", name) in self._objects[resource]:
            raise ApiError(
                409,
                f'{resource}.rbac.authorization.k8s.io "{name}" already exists',
                "AlreadyExists",
                {"name": name, "group": "rbac.authorization.k8s.io", "kind": resource},
            )
        obj["metadata"]["uid"] = str(uuid.uuid4())
        obj["metadata"]["creationTimestamp"] = now_rfc3339()
        return self._store(resource, ("", name), obj)

    def _create_secret(self, namespace: str, body: Any) -> JSON:
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
            raise ApiError(400, "the body is not a Secret")
        name = body["metadata"].get("name", "")
        if not isinstance(name, str) or len(name) > 253 or not DNS_SUBDOMAIN.match(name):
            raise ApiError(422, f'Secret "{name}" is invalid: metadata.name: Invalid value', "Invalid")
        if body["metadata"].get("namespace", namespace) != namespace:
            raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
        data = body.get("data") or {}
        for key, value in data.items():
            try:
                base64.b64decode(value, validate=True)
            except (ValueError, TypeError):
                raise ApiError(400, f"data[{key}]: illegal base64 data") from None
        if body.get("type") == "kubernetes.io/tls" and not {"tls.crt", "tls.key"} <= set(data):
            raise ApiError(422, f'Secret "{name}" is invalid: data[tls.crt], data[tls.key]: Required value', "Invalid")
        with self._cond:
            if (namespace, name) in self._objects["secrets"]:
                raise ApiError(
                    409, f'secrets "{name}" already exists', "AlreadyExists", {"name": name, "kind": "secrets"}
                )
            obj = copy.deepcopy(body)
            obj["metadata"]["namespace"] = namespace
            obj["metadata"]["uid"] = str(uuid.uuid4())
            obj["metadata"]["creationTimestamp"] = now_rfc3339()
            return self._store("secrets", (namespace, name), obj)
