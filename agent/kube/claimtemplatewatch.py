"""Every ResourceClaimTemplate (resource.k8s.io/v1, all namespaces), kept current by one list+watch.

For the scheduler extender, which scores a DRA pod by its claims' templates without calling the API server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kubernetes.client import ApiClient

from agent.kube.core import CoreCalls
from agent.kube.reflector import Reflector

T = TypeVar("T")


class ClaimTemplateWatcher(Reflector[T]):
    """All ResourceClaimTemplates, in every namespace."""

    def __init__(self, api_client: ApiClient, *, parse: Callable[[Mapping[str, Any]], T], **options: Any) -> None:
        core = CoreCalls(api_client)
        super().__init__(
            name="resourceclaimtemplates",
            description="ResourceClaimTemplates",
            list_func=core.list_resource_claim_template_for_all_namespaces,
            parse=parse,
            **options,
        )
