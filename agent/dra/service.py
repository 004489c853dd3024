"""The DRAPlugin service (v1 and v1beta1) and plugin registration, over a :class:`ClaimPreparer`: each claim
of a call gets its own answer, with its error if it failed; a claim named twice is prepared once."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc

from agent._proto.dra.v1 import api_pb2 as v1
from agent._proto.dra.v1 import api_pb2_grpc as v1_grpc
from agent._proto.dra.v1beta1 import api_pb2 as v1beta1
from agent._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from agent._proto.pluginregistration.v1 import api_pb2 as reg
from agent._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from agent.dra.constants import PLUGIN_TYPE, SUPPORTED_VERSIONS
from agent.errors import FpgaSlotError, shown, shown_claim, shown_name

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
#: How often a call waiting for the other instance's lock tries again (only during an update).
LOCK_RETRY_S = 0.01


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A ResourceClaim as the kubelet names it."""

    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"{shown_claim(self.namespace, self.name)} (uid {shown_name(self.uid)})"


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device of a prepared claim, as the kubelet records it."""

    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    #: The claim's requests it was allocated for; empty: every request.
    requests: tuple[str, ...] = ()


class ClaimPreparer(Protocol):
    """What preparing and releasing a claim means on this node (on the agent's event loop)."""

    async def prepare(self, claim: ClaimRef) -> Sequence[PreparedDevice]:
        """The claim's devices, ready for its pods; FpgaSlotError naming the claim and saying why not."""
        ...

    async def unprepare(self, claim: ClaimRef) -> None:
        """Release what ``prepare`` set up for the claim (idempotent); FpgaSlotError naming the claim."""
        ...


@contextlib.asynccontextmanager
async def locked(path: Path) -> AsyncIterator[None]:
    """One DRA call at a time on the node, across agent processes (two during an update): hold the exclusive
    ``flock`` on ``path`` (created 0600) for the block, waiting without blocking the event loop."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(LOCK_RETRY_S)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


class _Claims(Protocol):
    """The Claim message of either API version."""

    namespace: str
    uid: str
    name: str


def _refs(claims: Sequence[_Claims]) -> dict[str, ClaimRef]:
    """UID -> claim, in the order asked, each UID once."""
    refs: dict[str, ClaimRef] = {}
    for claim in claims:
        refs.setdefault(claim.uid, ClaimRef(claim.namespace, claim.uid, claim.name))
    return refs


class DraCore:
    """Both API versions' calls on one preparer, one at a time (with ``lock_file``, on the whole node)."""

    def __init__(self, preparer: ClaimPreparer, lock_file: Path | None = None) -> None:
        self._preparer = preparer
        self._lock = asyncio.Lock()
        self._lock_file = lock_file
        #: Calls whose RPC may be gone (its deadline passed) but which still run to their end.
        self._running: set[asyncio.Task[Any]] = set()

    async def prepare(self, claims: Sequence[_Claims], pb: Any) -> Any:
        """``pb``: the API version's message module, whose NodePrepareResourcesResponse is answered."""
        return await self._to_the_end(self._prepare(claims, pb.NodePrepareResourcesResponse()))

    async def unprepare(self, claims: Sequence[_Claims], pb: Any) -> Any:
        return await self._to_the_end(self._unprepare(claims, pb.NodeUnprepareResourcesResponse()))

    async def close(self) -> None:
        """At the stop: end the calls still running (their RPCs are gone with the server)."""
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)

    async def _to_the_end(self, call: Coroutine[Any, Any, _T]) -> _T:
        """Run the call to its end even when its RPC is cancelled (cut short, a programming would taint its slot)."""
        task = asyncio.ensure_future(call)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return await asyncio.shield(task)

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Held as each call is: work on the slots outside a call (programming at allocation) waits for it."""
        async with self._lock, contextlib.nullcontext() if self._lock_file is None else locked(self._lock_file):
            yield

    async def _prepare(self, claims: Sequence[_Claims], answer: Any) -> Any:
        async with self.exclusive():
            for uid, ref in _refs(claims).items():
                entry = answer.claims[uid]
                if not uid:
                    entry.error = f"{shown_claim(ref.namespace, ref.name)} has no UID"
                    continue
                try:
                    devices = await self._preparer.prepare(ref)
                except FpgaSlotError as exc:
                    logger.warning("%s not prepared: %s", ref, exc)
                    entry.error = str(exc)
                    continue
                logger.info("%s prepared: %d device(s)", ref, len(devices))
                for d in devices:
                    entry.devices.add(
                        request_names=d.requests, pool_name=d.pool, device_name=d.device, cdi_device_ids=d.cdi_ids
                    )
        return answer

    async def _unprepare(self, claims: Sequence[_Claims], answer: Any) -> Any:
        async with self.exclusive():
            for uid, ref in _refs(claims).items():
                entry = answer.claims[uid]
                try:
                    await self._preparer.unprepare(ref)
                except FpgaSlotError as exc:
                    logger.warning("%s not released: %s", ref, exc)
                    entry.error = str(exc)
                    continue
                logger.info("%s released", ref)
        return answer


class _DraMethods:
    """The two RPCs, for either API version: ``_pb`` is that version's message module (same fields)."""

    _pb: Any

    def __init__(self, core: DraCore) -> None:
        self._core = core

    async def NodePrepareResources(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        return await self._core.prepare(request.claims, self._pb)

    async def NodeUnprepareResources(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        return await self._core.unprepare(request.claims, self._pb)


class DraV1Servicer(_DraMethods, v1_grpc.DRAPluginServicer):
    _pb = v1


class DraV1beta1Servicer(_DraMethods, v1beta1_grpc.DRAPluginServicer):
    _pb = v1beta1


class RegistrationServicer(reg_grpc.RegistrationServicer):
    """What the kubelet's plugin watcher asks: who we are, then whether it took us."""

    def __init__(
        self,
        driver: str,
        endpoint: str,
        versions: Sequence[str] = SUPPORTED_VERSIONS,
        on_registered: Callable[[], None] | None = None,  # called (on the loop) each time the kubelet registers us
    ) -> None:
        self._info = reg.PluginInfo(type=PLUGIN_TYPE, name=driver, endpoint=endpoint, supported_versions=versions)
        self._on_registered = on_registered
        #: The last status the kubelet sent: None before any, else (registered, error).
        self.status: tuple[bool, str] | None = None

    async def GetInfo(
        self, request: reg.InfoRequest, context: grpc.aio.ServicerContext[reg.InfoRequest, reg.PluginInfo]
    ) -> reg.PluginInfo:
        return self._info

    async def NotifyRegistrationStatus(
        self,
        request: reg.RegistrationStatus,
        context: grpc.aio.ServicerContext[reg.RegistrationStatus, reg.RegistrationStatusResponse],
    ) -> reg.RegistrationStatusResponse:
        self.status = (request.plugin_registered, request.error)
        if request.plugin_registered:
            logger.info("kubelet registered DRA driver %s (endpoint %s)", self._info.name, self._info.endpoint)
            if self._on_registered is not None:
                self._on_registered()
            return reg.RegistrationStatusResponse()
        logger.error("kubelet refused DRA driver %s: %s", self._info.name, shown(request.error))
        await context.abort(grpc.StatusCode.UNKNOWN, f"registration failed: {shown(request.error)}")
