"""Every FpgaBitstream object (example.com/v1alpha1, cluster-scoped), kept current by one list+watch."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kubernetes.client import ApiClient

from agent.kube.core import CoreCalls
from agent.kube.reflector import Reflector

T = TypeVar("T")


class BitstreamWatcher(Reflector[T]):
    """All FpgaBitstream objects (a list fails until the CRD is installed: the watcher keeps trying)."""

    def __init__(self, api_client: ApiClient, *, parse: Callable[[Mapping[str, Any]], T], **options: Any) -> None:
        core = CoreCalls(api_client)
        super().__init__(
            name="fpgabitstreams",
            description="FpgaBitstream objects",
            list_func=core.list_fpga_bitstream,
            parse=parse,
            **options,
        )
