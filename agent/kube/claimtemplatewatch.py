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

import logging
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from kubernetes import client

from agent.kube.core import CoreCalls
from agent.kube.reflector import DEFAULT_BACKOFF, WATCH_TIMEOUT_S, Backoff, Reflector, WatchEventKind

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ClaimTemplateWatcher(Generic[T]):
    """Lists and watches all ResourceClaimTemplates until cancelled; hands each, parsed by ``parse``, on.

    ``parse(obj)`` runs in the worker thread and may raise ValueError to skip an object.
    The callbacks run on the event loop: ``on_replace(values)`` after each list,
    ``on_event(kind, value)`` per watch event (``ADDED``, ``MODIFIED``, ``DELETED``),
    ``on_error(text)`` when a list fails (the watcher keeps trying with backoff).
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        parse: Callable[[Mapping[str, Any]], T],
        on_replace: Callable[[list[T]], None],
        on_event: Callable[[WatchEventKind, T], None],
        on_error: Callable[[str], None],
        backoff: Backoff = DEFAULT_BACKOFF,
        watch_timeout_s: float = WATCH_TIMEOUT_S,
    ) -> None:
        core = CoreCalls(api_client)
        self._reflector: Reflector[T] = Reflector(
            name="resourceclaimtemplates",
            description="ResourceClaimTemplates",
            list_func=core.list_resource_claim_template_for_all_namespaces,
            list_kwargs={},
            parse=parse,
            on_replace=on_replace,
            on_event=on_event,
            on_error=on_error,
            backoff=backoff,
            watch_timeout_s=watch_timeout_s,
        )

    async def run(self) -> None:
        """List and watch ResourceClaimTemplates until cancelled (the watch is closed on the way out)."""
        logger.info("watching ResourceClaimTemplates")
        await self._reflector.run()
