"""Every ResourceClaimTemplate (resource.k8s.io/v1, all namespaces), kept current by one list+watch.

The scheduler extender scores a DRA pod by what its claims ask for, and a pod names
its claims' templates only. The scheduler sends the pod, never the templates, and a
handler must not call the API server; so one list+watch (the reflector: relist after
``410 Gone`` or a dropped watch, backoff, resourceVersion bookkeeping) keeps them all.
Templates are few and small, and change rarely.

This module reads the wire only: each object reaches the caller's ``parse`` (in the
worker thread) as the JSON the API server sent. What a template means is the
extender's business (``agent.extender.claimtemplates``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kubernetes import client

from agent.kube.core import CoreCalls
from agent.kube.objectwatch import ObjectWatcher

T = TypeVar("T")


class ClaimTemplateWatcher(ObjectWatcher[T]):
    """All ResourceClaimTemplates, in every namespace."""

    def __init__(
        self, api_client: client.ApiClient, *, parse: Callable[[Mapping[str, Any]], T], **options: Any
    ) -> None:
        core = CoreCalls(api_client)
        super().__init__(
            "resourceclaimtemplates",
            "ResourceClaimTemplates",
            list_func=core.list_resource_claim_template_for_all_namespaces,
            parse=parse,
            **options,
        )
