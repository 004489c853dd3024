"""Make a declared bitstream present in the node catalog: pull, verify, adopt, within the cache budget.
Concurrent calls for one name share one pull, whose end is reported once. Deadlines: docs/distribution.md."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack, aclosing, asynccontextmanager
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from agent.bitstreams.cache import CacheBudget, CachedFile
from agent.bitstreams.declaration import Credentials, Declaration, normalize_id
from agent.bitstreams.http import HttpsSource
from agent.bitstreams.registry import RegistryClient
from agent.errors import (
    DeclarationConflict,
    PlatformMismatch,
    PulledHashMismatch,
    PulledPlatformMismatch,
    PullStorageError,
    SourceAuthError,
    SourceUnreachable,
    UndeclaredBitstream,
)
from agent.files.atomic import StagedFile

logger = logging.getLogger(__name__)

#: The slowest average rate a pull may have: the deadline allows the declared size at this rate ...
FLOOR_BYTES_PER_S = 1 << 20
#: ... plus this much (connecting, the token, the manifest).
ALLOWANCE_S = 60.0
#: Bytes of a download gathered before one write (in a worker thread).
WRITE_BATCH_BYTES = 4 << 20

#: (pull Secret name, host) -> the credentials it holds; None when there is no such Secret.
CredentialsLookup = Callable[[str, str], Awaitable[Credentials | None]]


class StoredBitstream(Protocol):
    """A catalog entry, as far as pulling needs it."""

    @property
    def name(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def sha256(self) -> str: ...
    @property
    def added_at(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def file(self) -> str: ...
    @property
    def scope(self) -> str: ...


class BitstreamStore(Protocol):
    """The node catalog (``agent.programming.catalog.Catalog``) as pulling needs it; blocking, run in threads."""

    def list(self) -> Sequence[StoredBitstream]: ...
    def find(self, name: str) -> StoredBitstream | None: ...
    def prepare(self, files: Mapping[str, str]) -> None: ...
    def stage(self) -> StagedFile: ...
    def adopt(
        self,
        staged: StagedFile,
        name: str,
        sha256: str,
        size: int,
        platform: str,
        accelerator_id: str,
        source: str,
        scope: str = ...,
    ) -> StoredBitstream: ...
    def evict(self, name: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class PullEnded:
    """How one shared ensure of a name ended (reported once, whoever waited for it)."""

    name: str
    #: the declaration the ensure worked from (None: the name was not declared)
    declaration: Declaration | None
    #: the catalog lacked the declared file, so it was pulled (or the pull was refused)
    needed: bool
    #: the entry the pull brought into the catalog; None when it was there already, or on failure
    pulled: StoredBitstream | None
    error: Exception | None
    seconds: float


#: The owner's listener: told of every ensure's end, inside the pull, before any caller gets the result.
PullListener = Callable[[PullEnded], Awaitable[None]]


async def _no_credentials(secret: str, host: str) -> Credentials | None:
    return None


async def _no_listener(ended: PullEnded) -> None:
    return None


class BitstreamPuller:
    """Pulls declared bitstreams into one node catalog under one cache budget."""

    def __init__(
        self,
        store: BitstreamStore,
        registry: RegistryClient,
        https: HttpsSource,
        budget: CacheBudget,
        credentials: CredentialsLookup = _no_credentials,
        on_ended: PullListener = _no_listener,
        floor_bytes_per_s: float = FLOOR_BYTES_PER_S,
        allowance_s: float = ALLOWANCE_S,
    ) -> None:
        self.store = store
        self.floor_bytes_per_s = floor_bytes_per_s
        self.allowance_s = allowance_s
        self.registry = registry
        self.https = https
        self.budget = budget
        self._credentials = credentials
        self._on_ended = on_ended
        self._declarations: dict[str, Declaration] = {}
        self._pulls: dict[str, asyncio.Task[StoredBitstream]] = {}
        #: Held while a pull plans its evictions and reserves its bytes (the downloads themselves run together).
        self._room = asyncio.Lock()

    # ------------------------------------------------------------------ declarations
    def declare(self, declaration: Declaration) -> bool:
        """Take ``declaration`` (new, or in place of its name's); False when exactly it was declared already."""
        if self._declarations.get(declaration.name) == declaration:
            return False
        self._declarations[declaration.name] = declaration
        return True

    def withdraw(self, name: str) -> bool:
        """Forget the declaration of ``name``; False when there was none."""
        return self._declarations.pop(name, None) is not None

    def replace_all(self, declarations: Iterable[Declaration]) -> tuple[list[Declaration], list[str]]:
        """Take the cluster's whole list (after a relist): the declarations new or changed, the names withdrawn."""
        fresh = {declaration.name: declaration for declaration in declarations}
        changed = [d for d in fresh.values() if self._declarations.get(d.name) != d]
        withdrawn = sorted(set(self._declarations) - set(fresh))
        self._declarations = fresh
        return changed, withdrawn

    def declared(self, name: str) -> Declaration | None:
        return self._declarations.get(name)

    async def start(self, entries: Sequence[StoredBitstream] | None = None) -> None:
        """Prepare the catalog directory and seed the LRU order; ``entries``: the catalog as just read, or None."""
        if entries is None:
            entries = await asyncio.to_thread(self.store.list)
        await asyncio.to_thread(self.store.prepare, {entry.name: entry.file for entry in entries})
        for entry in sorted((e for e in entries if e.source), key=lambda e: e.added_at):
            self.budget.touch(entry.name)

    # ------------------------------------------------------------------ ensuring
    async def ensure(self, name: str, platform: str | None = None) -> StoredBitstream:
        """The catalog entry for ``name``, pulled first if needed; ``platform``: the slot's, if known."""
        return await asyncio.shield(self.pull(name, platform))

    def pull(self, name: str, platform: str | None = None) -> asyncio.Task[StoredBitstream]:
        """The ensure of ``name`` under way (the first caller's ``platform`` checked), or a new one; cancelling
        it cancels the ensure for everyone."""
        running = self._pulls.get(name)
        if running is None or running.done():
            running = asyncio.create_task(self._ensure(name, platform), name=f"pull bitstream {name}")
            self._pulls[name] = running
            running.add_done_callback(functools.partial(self._pull_done, name))
        return running

    async def close(self) -> None:
        """Cancel the pulls in flight and wait for them to clean up."""
        pulls = list(self._pulls.values())
        for pull in pulls:
            pull.cancel()
        await asyncio.gather(*pulls, return_exceptions=True)

    def _pull_done(self, name: str, pull: asyncio.Task[StoredBitstream]) -> None:
        if self._pulls.get(name) is pull:
            del self._pulls[name]
        if not pull.cancelled() and pull.exception() is not None:
            logger.debug("pull failed: %s", pull.exception())

    async def _ensure(self, name: str, platform: str | None) -> StoredBitstream:
        started = time.monotonic()
        declaration = self._declarations.get(name)
        needed = False
        try:
            local = await asyncio.to_thread(self.store.find, name)
            if local is not None and (declaration is None or _same_file(local, declaration)):
                self.budget.touch(name)
                entry, pulled = local, None
            else:
                needed = True
                entry = pulled = await self._pull_declared(name, declaration, local, platform)
        except Exception as exc:
            await self._on_ended(PullEnded(name, declaration, needed, None, exc, time.monotonic() - started))
            raise
        await self._on_ended(PullEnded(name, declaration, needed, pulled, None, time.monotonic() - started))
        return entry

    async def _pull_declared(
        self, name: str, declaration: Declaration | None, local: StoredBitstream | None, platform: str | None
    ) -> StoredBitstream:
        """Pull ``declaration`` in place of ``local`` (absent, or another file), after the checks that refuse it."""
        if declaration is None:
            raise UndeclaredBitstream(
                f"bitstream {name!r} is neither in this node's catalog nor declared in the cluster"
            )
        if local is not None and not local.source:
            raise DeclarationConflict(
                f"bitstream {name!r}: the node's local entry has sha256 {local.sha256}, the cluster's FpgaBitstream "
                f"declares {declaration.sha256}; remove one of them or make them the same file"
            )
        if platform is not None:
            wanted = normalize_id(platform, "the slot's platform")
            if wanted != declaration.platform:
                raise PulledPlatformMismatch(
                    f"bitstream {name!r} is declared for platform {declaration.platform}, the slot has {wanted}"
                )
        what = f"bitstream {declaration.name!r} from {declaration.source}"
        try:
            return await self._pull_into_catalog(declaration, what)
        except TimeoutError:
            raise
        except OSError as exc:
            raise PullStorageError(f"{what}: the node could not store it: {exc}") from exc

    # ------------------------------------------------------------------ pulling

    async def _pull_into_catalog(self, declaration: Declaration, what: str) -> StoredBitstream:
        name = declaration.name
        with ExitStack() as held:
            async with self._room:  # plan, evict and reserve as one step: two pulls never count the same room
                await self._make_room(declaration)
                held.enter_context(self.budget.reserve(name, declaration.size))
            credentials = None
            if declaration.pull_secret:
                credentials = await self._credentials(declaration.pull_secret, declaration.host)
            if declaration.pull_secret and credentials is None:
                logger.warning(
                    "%s: pull Secret %s not found; pulling without credentials", what, declaration.pull_secret
                )
            with await asyncio.to_thread(self.store.stage) as staged:
                try:
                    await self._download(declaration, credentials, staged, what)
                except SourceAuthError as exc:
                    if declaration.pull_secret and credentials is None:
                        raise SourceAuthError(
                            f"{exc}; its pull Secret {declaration.pull_secret!r} is not in the agent's namespace"
                        ) from exc
                    raise
                try:
                    entry = await asyncio.to_thread(
                        self.store.adopt,
                        staged,
                        name,
                        declaration.sha256,
                        declaration.size,
                        declaration.platform,
                        declaration.accelerator_id,
                        declaration.source,
                        declaration.scope,
                    )
                except PlatformMismatch as exc:
                    raise PulledPlatformMismatch(f"{what}: {exc}") from exc
        self.budget.touch(name)
        logger.info("%s: pulled and verified (%d bytes, sha256 %s)", what, entry.size, entry.sha256)
        return entry

    def deadline_s(self, size: int) -> float:
        """How long a pull of ``size`` bytes may take, all of it (the token and manifest too)."""
        return self.allowance_s + size / self.floor_bytes_per_s

    async def _download(
        self, declaration: Declaration, credentials: Credentials | None, staged: StagedFile, what: str
    ) -> None:
        """Stream the declared file into ``staged`` within :meth:`deadline_s`; SourceUnreachable past it."""
        deadline_s = self.deadline_s(declaration.size)
        received = [0]
        started = time.monotonic()

        async def counted(chunks: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
            async for chunk in chunks:
                received[0] += len(chunk)
                yield chunk

        try:
            async with asyncio.timeout(deadline_s) as limit:
                opened = (
                    self.https.open(str(declaration.https), credentials)
                    if declaration.oci is None
                    else _open_oci(self.registry, declaration, credentials)
                )
                async with opened as chunks, aclosing(counted(chunks)) as counting:
                    await download_verified(counting, staged.stream, declaration.size, declaration.sha256, what)
        except TimeoutError:
            if not limit.expired():
                raise
            seconds = time.monotonic() - started
            raise SourceUnreachable(
                f"{what}: not pulled within its deadline of {deadline_s:.0f} s ({declaration.size} bytes at the floor "
                f"rate of {self.floor_bytes_per_s:.0f} bytes/s, plus {self.allowance_s:.0f} s); the source sent "
                f"{received[0]} bytes in {seconds:.0f} s ({received[0] / max(seconds, 1e-3):.0f} bytes/s)"
            ) from None

    async def _make_room(self, declaration: Declaration) -> None:
        while True:
            entries = await asyncio.to_thread(self.store.list)
            files = [CachedFile(e.name, e.size, e.added_at) for e in entries if e.source]
            for victim in self.budget.plan(files, declaration.name, declaration.size):
                if victim in self.budget.in_use():  # taken up meanwhile: plan again
                    break
                if await asyncio.to_thread(self.store.evict, victim):
                    self.budget.forget(victim)
            else:
                return


@asynccontextmanager
async def _open_oci(
    registry: RegistryClient, declaration: Declaration, credentials: Credentials | None
) -> AsyncIterator[AsyncIterator[bytes]]:
    """Fetch the manifest, check its one layer against the declaration, then stream the layer."""
    reference = declaration.oci
    assert reference is not None
    layer = await registry.fetch_layer(reference, credentials)
    if layer.sha256 != declaration.sha256 or layer.size != declaration.size:
        raise PulledHashMismatch(
            f"bitstream {declaration.name!r}: the artifact {reference} holds {layer.size} bytes with sha256 "
            f"{layer.sha256}, the declaration says {declaration.size} bytes with sha256 {declaration.sha256}"
        )
    async with registry.open_blob(reference, layer.digest, credentials) as chunks:
        yield chunks


def _same_file(local: StoredBitstream, declaration: Declaration) -> bool:
    """Whether the catalog's entry is the declared file (a pulled one also of the declared scope)."""
    return local.sha256 == declaration.sha256 and (not local.source or local.scope == declaration.scope)


async def download_verified(chunks: AsyncIterator[bytes], stream: BinaryIO, size: int, sha256: str, what: str) -> None:
    """Write ``chunks`` to ``stream`` in worker threads; return once they were ``size`` bytes with ``sha256``, else
    PulledHashMismatch (at once when the source sends more than ``size``)."""
    digest = hashlib.sha256()
    written = 0
    batch: list[bytes] = []
    batched = 0
    async for chunk in chunks:
        written += len(chunk)
        if written > size:
            raise PulledHashMismatch(f"{what}: the source sends more than the declared {size} bytes")
        batch.append(chunk)
        batched += len(chunk)
        if batched >= WRITE_BATCH_BYTES:
            await asyncio.to_thread(_write, stream, digest, batch)
            batch, batched = [], 0
    await asyncio.to_thread(_write, stream, digest, batch)
    if written != size:
        raise PulledHashMismatch(f"{what}: the source sent {written} bytes, the declaration says {size}")
    actual = digest.hexdigest()
    if actual != sha256:
        raise PulledHashMismatch(f"{what}: the pulled file has sha256 {actual}, the declaration says {sha256}")


def _write(stream: BinaryIO, digest: hashlib._Hash, batch: list[bytes]) -> None:
    for chunk in batch:
        digest.update(chunk)
        stream.write(chunk)
