"""Every FpgaNodeState object, kept current by one list+watch, for the scheduler extender."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kubernetes.client import ApiClient

from agent.kube.core import CoreCalls
from agent.kube.reflector import Reflector

T = TypeVar("T")


class NodeStateWatcher(Reflector[T]):
    """All FpgaNodeState objects (a list fails until the CRD is installed: the watcher keeps trying)."""

    def __init__(self, api_client: ApiClient, *, parse: Callable[[Mapping[str, Any]], T], **options: Any) -> None:
        core = CoreCalls(api_client)
        super().__init__(
            name="fpganodestates",
            description="FpgaNodeState objects",
            list_func=core.list_fpga_node_state_for_all_namespaces,
            parse=parse,
            **options,
        )
