"""Every object of one kind, kept current by one list+watch: the base of the cluster-wide watchers.

Subclasses pass the CoreCalls list method as ``list_func=`` (tests/deploy/test_rbac.py reads it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from agent.kube.reflector import DEFAULT_BACKOFF, WATCH_TIMEOUT_S, Backoff, Reflector, WatchEventKind

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ObjectWatcher(Generic[T]):
    """Lists and watches every object of its kind until cancelled; hands each, parsed, on.

    ``parse(obj)`` runs in the worker thread (ValueError skips the object). On the event loop:
    ``on_replace(values)`` after each list, ``on_event(kind, value)`` per watch event,
    ``on_error(text)`` when a list fails (it retries with backoff).
    """

    def __init__(
        self,
        resource: str,
        description: str,
        *,
        list_func: Callable[..., Any],
        parse: Callable[[Mapping[str, Any]], T],
        on_replace: Callable[[list[T]], None],
        on_event: Callable[[WatchEventKind, T], None],
        on_error: Callable[[str], None],
        backoff: Backoff = DEFAULT_BACKOFF,
        watch_timeout_s: float = WATCH_TIMEOUT_S,
    ) -> None:
        self._description = description
        self._reflector: Reflector[T] = Reflector(
            name=resource,
            description=description,
            list_func=list_func,
            list_kwargs={},
            parse=parse,
            on_replace=on_replace,
            on_event=on_event,
            on_error=on_error,
            backoff=backoff,
            watch_timeout_s=watch_timeout_s,
        )

    async def run(self) -> None:
        """List and watch until cancelled (the watch is closed on the way out)."""
        logger.info("watching %s", self._description)
        await self._reflector.run()
