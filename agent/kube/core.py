"""The requests fpga-slot makes, lighter than the generated ``CoreV1Api``: same method names and keyword arguments,
``ApiException`` for a non-2xx answer; answers are plain JSON, or the raw response with ``_preload_content=False``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from agent.errors import KubeError
from agent.kube.client import describe_api_error
from agent.kube.nodefields import as_mapping

#: keyword argument -> query parameter, as the generated client names them
_QUERY = {
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "_continue": "continue",
    "field_manager": "fieldManager",
    "field_selector": "fieldSelector",
    "label_selector": "labelSelector",
    "limit": "limit",
    "resource_version": "resourceVersion",
    "resource_version_match": "resourceVersionMatch",
    "timeout_seconds": "timeoutSeconds",
    "watch": "watch",
}
_JSON = "application/json"
_JSON_PATCH = "application/json-patch+json"


class CoreCalls:
    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> Any:
        return self._request("GET", "/api/v1/pods", {}, kwargs)

    def list_node(self, **kwargs: Any) -> Any:
        return self._request("GET", "/api/v1/nodes", {}, kwargs)

    def read_node(self, name: str, **kwargs: Any) -> Any:
        return self._request("GET", "/api/v1/nodes/{name}", {"name": name}, kwargs)

    def patch_node(self, name: str, body: object, **kwargs: Any) -> Any:
        kwargs.setdefault("_content_type", "application/merge-patch+json")
        return self._request("PATCH", "/api/v1/nodes/{name}", {"name": name}, kwargs, body)

    def create_namespaced_event(self, namespace: str, body: object, **kwargs: Any) -> Any:
        return self._request("POST", "/api/v1/namespaces/{namespace}/events", {"namespace": namespace}, kwargs, body)

    def read_namespaced_resource_claim(self, name: str, namespace: str, **kwargs: Any) -> Any:
        path = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
        return self._request("GET", path, {"namespace": namespace, "name": name}, kwargs)

    def patch_namespaced_resource_claim_status(self, name: str, namespace: str, body: object, **kwargs: Any) -> Any:
        kwargs.setdefault("_content_type", _JSON_PATCH)
        path = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}/status"
        return self._request("PATCH", path, {"namespace": namespace, "name": name}, kwargs, body)

    def list_resource_claim_for_all_namespaces(self, **kwargs: Any) -> Any:
        return self._request("GET", "/apis/resource.k8s.io/v1/resourceclaims", {}, kwargs)

    def list_resource_claim_template_for_all_namespaces(self, **kwargs: Any) -> Any:
        return self._request("GET", "/apis/resource.k8s.io/v1/resourceclaimtemplates", {}, kwargs)

    def read_resource_slice(self, name: str, **kwargs: Any) -> Any:
        return self._request("GET", "/apis/resource.k8s.io/v1/resourceslices/{name}", {"name": name}, kwargs)

    def create_resource_slice(self, body: object, **kwargs: Any) -> Any:
        return self._request("POST", "/apis/resource.k8s.io/v1/resourceslices", {}, kwargs, body)

    def replace_resource_slice(self, name: str, body: object, **kwargs: Any) -> Any:
        return self._request("PUT", "/apis/resource.k8s.io/v1/resourceslices/{name}", {"name": name}, kwargs, body)

    def delete_resource_slice(self, name: str, **kwargs: Any) -> Any:
        return self._request("DELETE", "/apis/resource.k8s.io/v1/resourceslices/{name}", {"name": name}, kwargs)

    def read_namespaced_secret(self, name: str, namespace: str, **kwargs: Any) -> Any:
        path = "/api/v1/namespaces/{namespace}/secrets/{name}"
        return self._request("GET", path, {"namespace": namespace, "name": name}, kwargs)

    def create_namespaced_secret(self, namespace: str, body: object, **kwargs: Any) -> Any:
        return self._request("POST", "/api/v1/namespaces/{namespace}/secrets", {"namespace": namespace}, kwargs, body)

    def read_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> Any:
        path = "/api/v1/namespaces/{namespace}/pods/{name}"
        return self._request("GET", path, {"namespace": namespace, "name": name}, kwargs)

    def read_namespaced_daemon_set(self, name: str, namespace: str, **kwargs: Any) -> Any:
        path = "/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"
        return self._request("GET", path, {"namespace": namespace, "name": name}, kwargs)

    def read_namespace(self, name: str, **kwargs: Any) -> Any:
        return self._request("GET", "/api/v1/namespaces/{name}", {"name": name}, kwargs)

    def read_namespaced_service_account(self, name: str, namespace: str, **kwargs: Any) -> Any:
        path = "/api/v1/namespaces/{namespace}/serviceaccounts/{name}"
        return self._request("GET", path, {"namespace": namespace, "name": name}, kwargs)

    def patch_namespaced_service_account(self, name: str, namespace: str, body: object, **kwargs: Any) -> Any:
        kwargs.setdefault("_content_type", _JSON_PATCH)
        path = "/api/v1/namespaces/{namespace}/serviceaccounts/{name}"
        return self._request("PATCH", path, {"namespace": namespace, "name": name}, kwargs, body)

    def create_cluster_role(self, body: object, **kwargs: Any) -> Any:
        return self._request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", {}, kwargs, body)

    def create_cluster_role_binding(self, body: object, **kwargs: Any) -> Any:
        return self._request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {}, kwargs, body)

    def list_fpga_bitstream(self, **kwargs: Any) -> Any:
        return self._request("GET", "/apis/example.com/v1alpha1/fpgabitstreams", {}, kwargs)

    def list_fpga_node_state_for_all_namespaces(self, **kwargs: Any) -> Any:
        return self._request("GET", "/apis/example.com/v1alpha1/fpganodestates", {}, kwargs)

    def read_namespaced_fpga_node_state(self, name: str, namespace: str, **kwargs: Any) -> Any:
        path = "/apis/example.com/v1alpha1/namespaces/{namespace}/fpganodestates/{name}"
        return self._request("GET", path, {"namespace": namespace, "name": name}, kwargs)

    def create_namespaced_fpga_node_state(self, namespace: str, body: object, **kwargs: Any) -> Any:
        path = "/apis/example.com/v1alpha1/namespaces/{namespace}/fpganodestates"
        return self._request("POST", path, {"namespace": namespace}, kwargs, body)

    def replace_namespaced_fpga_node_state(self, name: str, namespace: str, body: object, **kwargs: Any) -> Any:
        path = "/apis/example.com/v1alpha1/namespaces/{namespace}/fpganodestates/{name}"
        return self._request("PUT", path, {"namespace": namespace, "name": name}, kwargs, body)

    def delete_namespaced_fpga_node_state(self, name: str, namespace: str, **kwargs: Any) -> Any:
        path = "/apis/example.com/v1alpha1/namespaces/{namespace}/fpganodestates/{name}"
        return self._request("DELETE", path, {"namespace": namespace, "name": name}, kwargs)

    def _request(
        self, method: str, path: str, path_params: dict[str, str], kwargs: dict[str, Any], body: object = None
    ) -> Any:
        preload = kwargs.pop("_preload_content", True)
        timeout = kwargs.pop("_request_timeout", None)
        headers = {"Accept": _JSON}
        content_type = kwargs.pop("_content_type", None)
        if body is not None:
            headers["Content-Type"] = content_type or _JSON
        unknown = set(kwargs) - set(_QUERY)
        if unknown:
            raise TypeError(f"{method} {path}: unexpected arguments {sorted(unknown)}")
        query = [(_QUERY[key], value) for key, value in kwargs.items() if value is not None]
        request = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            path_params=path_params,
            query_params=query,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response: Any = self.api_client.call_api(*request, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        if not preload:
            return response.response
        response.read()
        return json.loads(response.data) if response.data else None


def list_pages(
    list_func: Callable[..., Any], failed: str, timeout: float | tuple[float, float], page_size: int = 500
) -> Iterator[Mapping[str, Any]]:
    """Every item of a paged list (a large cluster's objects do not arrive as one response, kubectl's page size);
    KubeError ``<failed>: <why>``."""
    token = ""
    while True:
        try:
            page = list_func(limit=page_size, _continue=token or None, _request_timeout=timeout)
        except Exception as exc:
            raise KubeError(f"{failed}: {describe_api_error(exc)[1]}") from exc
        if not isinstance(page, Mapping):
            raise KubeError(f"{failed}: the API server's answer is not a JSON object")
        yield from (as_mapping(item) for item in page.get("items") or [])
        token = str(as_mapping(page.get("metadata")).get("continue") or "")
        if not token:
            return
