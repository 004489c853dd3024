"""Make a declared bitstream present in the node catalog: pull, verify, adopt, within the cache budget.

:meth:`BitstreamPuller.ensure` is what the agent calls for a pod's bitstream name:

* an entry of that name already in the catalog is used when no FpgaBitstream
  declares the name, or when the declaration's sha256 is the entry's; a local entry
  (``catalog add``) that differs from the declaration is a DeclarationConflict, a
  pulled one is replaced by a new pull;
* otherwise the declaration is pulled: its platform checked against the slot's,
  room made in the cache budget (least recently used pulled files out, never one in
  use), the file streamed from the OCI registry or HTTPS server into a temp file in
  the catalog directory, size and sha256 checked as the bytes arrive, then adopted
  by the catalog (which checks a GBS header against the declaration) by a rename.

Concurrent calls for one name share one pull. Every failure leaves the catalog as
it was, so the next attempt starts clean.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager
from pathlib import Path
from typing import Protocol

from agent.bitstreams.cache import CacheBudget, CachedFile
from agent.bitstreams.declaration import Credentials, Declaration, normalize_id
from agent.bitstreams.download import download_verified
from agent.bitstreams.https import HttpsSource
from agent.bitstreams.registry import RegistryClient
from agent.errors import (
    DeclarationConflict,
    PlatformMismatch,
    PulledHashMismatch,
    PulledPlatformMismatch,
    SourceAuthError,
    UndeclaredBitstream,
)

logger = logging.getLogger(__name__)

#: The credentials a pull Secret (by name) holds for a host (a registry ``host[:port]`` or a URL's host);
#: None when there is no such Secret. (``agent.bitstreams.secret`` reads them from the Secret's data.)
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


class BitstreamStore(Protocol):
    """The node catalog, as far as pulling needs it (blocking methods; the puller calls them in threads)."""

    @property
    def directory(self) -> Path: ...
    def entries(self) -> Sequence[StoredBitstream]: ...
    def find(self, name: str) -> StoredBitstream | None: ...
    def prepare(self) -> None: ...
    def adopt(
        self, staged: Path, name: str, sha256: str, size: int, platform: str, accelerator_id: str, source: str
    ) -> StoredBitstream: ...
    def remove(self, name: str) -> bool: ...


async def _no_credentials(secret: str, host: str) -> Credentials | None:
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
    ) -> None:
        self.store = store
        self.registry = registry
        self.https = https
        self.budget = budget
        self._credentials = credentials
        self._declarations: dict[str, Declaration] = {}
        self._pulls: dict[str, asyncio.Future[StoredBitstream]] = {}

    # ------------------------------------------------------------------ declarations
    def declare(self, declaration: Declaration) -> None:
        self._declarations[declaration.name] = declaration

    def withdraw(self, name: str) -> None:
        self._declarations.pop(name, None)

    def declared(self, name: str) -> Declaration | None:
        return self._declarations.get(name)

    async def start(self) -> None:
        """Prepare the catalog directory (removing temp files a crash left) and seed the LRU order."""
        await asyncio.to_thread(self.store.prepare)
        for entry in sorted(await self._pulled_entries(), key=lambda e: e.added_at):
            self.budget.touch(entry.name)

    # ------------------------------------------------------------------ ensuring
    async def ensure(self, name: str, platform: str | None = None) -> StoredBitstream:
        """The catalog entry for ``name``, pulled first if needed; ``platform``: the slot's, if known."""
        declaration = self._declarations.get(name)
        local = await asyncio.to_thread(self.store.find, name)
        if local is not None and (declaration is None or local.sha256 == declaration.sha256):
            self.budget.touch(name)
            return local
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
        running = self._pulls.get(name)
        if running is None:
            running = asyncio.ensure_future(self._pull(declaration))
            self._pulls[name] = running
            running.add_done_callback(self._pull_done)
        return await asyncio.shield(running)

    def pin(self, name: str) -> AbstractContextManager[None]:
        """Keep ``name`` from eviction while the block runs (e.g. while a slot is programmed from it)."""
        return self.budget.pin(name)

    async def close(self) -> None:
        """Cancel the pulls in flight and wait for them to clean up."""
        pulls = list(self._pulls.values())
        for pull in pulls:
            pull.cancel()
        await asyncio.gather(*pulls, return_exceptions=True)

    def _pull_done(self, pull: asyncio.Future[StoredBitstream]) -> None:
        for name, running in list(self._pulls.items()):
            if running is pull:
                del self._pulls[name]
        if not pull.cancelled() and pull.exception() is not None:
            logger.debug("pull failed: %s", pull.exception())  # retrieved: every waiter got it already

    # ------------------------------------------------------------------ pulling
    async def _pull(self, declaration: Declaration) -> StoredBitstream:
        name = declaration.name
        what = f"bitstream {name!r} from {declaration.source}"
        await self._make_room(declaration)
        with self.budget.reserve(name, declaration.size):
            credentials = None
            if declaration.pull_secret:
                credentials = await self._credentials(declaration.pull_secret, declaration.host)
            if declaration.pull_secret and credentials is None:
                logger.warning(
                    "%s: pull Secret %s not found; pulling without credentials", what, declaration.pull_secret
                )
            try:
                async with self._open(declaration, credentials) as chunks:
                    staged = await download_verified(
                        chunks, self.store.directory, declaration.size, declaration.sha256, what
                    )
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
                )
            except PlatformMismatch as exc:
                raise PulledPlatformMismatch(f"{what}: {exc}") from exc
        self.budget.touch(name)
        logger.info("%s: pulled and verified (%d bytes, sha256 %s)", what, entry.size, entry.sha256)
        return entry

    def _open(
        self, declaration: Declaration, credentials: Credentials | None
    ) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        if declaration.oci is None:
            return self.https.open(str(declaration.https), credentials)
        return _open_oci(self.registry, declaration, credentials)

    async def _make_room(self, declaration: Declaration) -> None:
        files = [CachedFile(e.name, e.size, e.added_at) for e in await self._pulled_entries()]
        for victim in self.budget.plan(files, declaration.name, declaration.size):
            if await asyncio.to_thread(self.store.remove, victim):
                self.budget.forget(victim)

    async def _pulled_entries(self) -> list[StoredBitstream]:
        entries = await asyncio.to_thread(self.store.entries)
        return [entry for entry in entries if entry.source]


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
