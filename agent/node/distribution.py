"""Cluster-declared bitstreams on this node: the FpgaBitstream watch feeding the puller, pulls on demand,
early pulls for pods bound here, prefetch, Events and metrics (docs/distribution.md)."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import aiohttp

from agent.bitstreams.cache import CacheBudget
from agent.bitstreams.declaration import Credentials, Declaration, normalize_id, parse_declaration
from agent.bitstreams.http import HttpsSource, client_timeout
from agent.bitstreams.linklocal import pull_connector
from agent.bitstreams.puller import BitstreamPuller, PullEnded, StoredBitstream
from agent.bitstreams.registry import RegistryClient
from agent.bitstreams.secret import credentials_from_secret
from agent.config import Config
from agent.errors import (
    ArtifactFormatError,
    CacheFullError,
    CatalogError,
    ConfigError,
    DeclarationConflict,
    KubeError,
    PulledHashMismatch,
    PulledPlatformMismatch,
    PullError,
    PullInProgress,
    PullStorageError,
    SourceAuthError,
    SourceNotFound,
    SourceUnreachable,
)
from agent.kube.pods import PodInfo
from agent.kube.reflector import Watcher, WatchEventKind
from agent.kube.secrets import SecretReader
from agent.node.metrics import AgentMetrics
from agent.node.pods import EventSink, PodDirectory, PodView
from agent.node.reconfigure import ANNOTATION
from agent.programming.catalog import Catalog
from agent.slots.registry import SlotRegistry

logger = logging.getLogger(__name__)

#: The share of a call's remaining time a pull may take; the rest is left for programming.
PULL_SHARE = 0.5
#: Pod phases in which a pod will start no more containers: no early pull for them.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})

#: The metric label of each kind of failed pull (the first matching class wins).
PULL_RESULTS: tuple[tuple[type[CatalogError], str], ...] = (
    (SourceUnreachable, "unreachable"),
    (SourceAuthError, "auth"),
    (SourceNotFound, "not_found"),
    (ArtifactFormatError, "format"),
    (PulledHashMismatch, "hash_mismatch"),
    (PulledPlatformMismatch, "platform_mismatch"),
    (CacheFullError, "cache_full"),
    (PullStorageError, "storage"),
    (DeclarationConflict, "conflict"),
)


def pull_result(exc: BaseException) -> str:
    """The ``result`` label of a failed pull."""
    return next((label for kind, label in PULL_RESULTS if isinstance(exc, kind)), "failed")


def annotated_bitstreams(pod: PodView) -> set[str]:
    """Every bitstream name a pod's annotations ask for (the pod's and each container's)."""
    return {
        value
        for key, value in pod.annotations.items()
        if value and (key == ANNOTATION or key.startswith(ANNOTATION + "."))
    }


def parse_object(obj: Mapping[str, Any]) -> Declaration:
    """An FpgaBitstream as a Declaration; ValueError (the watch skips and logs the object) when it is bad."""
    try:
        return parse_declaration(dict(obj))
    except CatalogError as exc:
        raise ValueError(str(exc)) from None


def registry_tls(config: Config) -> ssl.SSLContext:
    """The system's CA certificates, and those of ``--bitstream-ca-file``; ConfigError naming the flag."""
    context = ssl.create_default_context()
    if config.bitstream_ca_file is not None:
        try:
            context.load_verify_locations(cafile=str(config.bitstream_ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"--bitstream-ca-file: cannot load {config.bitstream_ca_file}: {exc}") from None
    return context


class Distribution:
    """The cluster's bitstreams for one node: declarations, pulls, their Events and metrics."""

    def __init__(
        self,
        config: Config,
        *,
        catalog: Catalog,
        api_client: Any,  # kubernetes.client.ApiClient (untyped library)
        registry: SlotRegistry,
        pods: PodDirectory | None,
        events: EventSink | None,
        metrics: AgentMetrics,
        loading: Callable[[], Collection[str]] = frozenset,
    ) -> None:
        """``loading``: bitstreams that container starts or claims in flight want (never evicted)."""
        self._config = config
        self._registry = registry
        self._pods = pods
        self._events = events
        self._metrics = metrics
        self._loading = loading
        self._tls = registry_tls(config)
        self.store = catalog
        self.budget = CacheBudget(config.bitstream_cache_bytes, in_use=self.in_use)
        self._secrets = SecretReader(api_client, config.namespace)
        self._watcher: Watcher[Declaration] = Watcher(
            api_client,
            "fpgabitstreams",
            parse=parse_object,
            on_replace=self._replace,
            on_event=self._changed,
            on_error=self._watch_failed,
        )
        #: None until :meth:`run` has opened the HTTP client
        self.puller: BitstreamPuller | None = None
        #: name -> the pods (by uid) to tell when the pull of that name under way brings its file
        self._waiters: dict[str, dict[str, PodView]] = {}
        self._early: set[tuple[str, str]] = set()  # (pod uid, name): pulls started for a pod already
        self._watch_error = ""

    # ------------------------------------------------------------------ lifecycle
    async def run(self, entries: Sequence[StoredBitstream]) -> None:
        """Pull for this node until cancelled; ``entries``: the catalog as read at start (for eviction order)."""
        connector = pull_connector(self._tls, self._config.bitstream_allow_link_local)
        async with aiohttp.ClientSession(connector=connector, timeout=client_timeout()) as session:
            puller = BitstreamPuller(
                self.store,
                RegistryClient(session, self._config.bitstream_plain_http),
                HttpsSource(session),
                self.budget,
                self._credentials,
                self._pull_ended,
            )
            self.puller = puller
            try:
                try:
                    await puller.start(entries)
                except OSError as exc:  # pulls will say so again; the agent serves its slots regardless
                    logger.error("bitstream catalog %s cannot be prepared for pulls: %s", self.store.directory, exc)
                await self._watcher.run()
            finally:
                self.puller = None
                await puller.close()

    def in_use(self) -> set[str]:
        """Bitstreams the cache must keep: loaded in a held slot, being programmed, or wanted by a call in flight."""
        names = set(self._loading())
        for state in self._registry.snapshot():
            if state.programming is not None:
                names.add(state.programming.bitstream)
            if state.holder is not None and state.content is not None:
                names.add(state.content.bitstream)
        return names

    # ------------------------------------------------------------------ declarations
    def _replace(self, declarations: list[Declaration]) -> None:
        """A relist: only what it changed is acted on (an unchanged list starts no pulls, scans no pods)."""
        assert self.puller is not None
        changed, withdrawn = self.puller.replace_all(declarations)
        if not changed and not withdrawn:
            logger.debug("%d FpgaBitstream declarations, none changed", len(declarations))
            return
        logger.info(
            "%d FpgaBitstream declarations: %s (new or changed: %s; withdrawn: %s)",
            len(declarations),
            ", ".join(sorted(d.name for d in declarations)) or "none",
            ", ".join(sorted(d.name for d in changed)) or "none",
            ", ".join(withdrawn) or "none",
        )
        for declaration in changed:
            self._declared(declaration)

    def _changed(self, kind: WatchEventKind, declaration: Declaration) -> None:
        assert self.puller is not None
        if kind == "DELETED":
            if self.puller.withdraw(declaration.name):
                logger.info("FpgaBitstream %s withdrawn", declaration.name)
        elif self.puller.declare(declaration):
            logger.info("FpgaBitstream %s declared (%s)", declaration.name, declaration.source)
            self._declared(declaration)

    def _declared(self, declaration: Declaration) -> None:
        """A new or changed declaration: prefetch it, and pull it for the pods bound here that want it."""
        if declaration.prefetch:
            if declaration.platform in self._platforms():
                self._pull_in_background(None, declaration)
            else:
                logger.info(
                    "FpgaBitstream %s: prefetch skipped, no slot of this node has platform %s",
                    declaration.name,
                    declaration.platform,
                )
        if self._pods is not None:
            for pod in self._pods.pods():
                if declaration.name in annotated_bitstreams(pod):
                    self._pull_early(pod, declaration)

    def _watch_failed(self, text: str) -> None:
        if text != self._watch_error:
            logger.warning("FpgaBitstream objects cannot be listed (%s): pulls wait for them", text)
        self._watch_error = text

    def _platforms(self) -> set[str]:
        platforms = set()
        for state in self._registry.snapshot():
            try:
                platforms.add(normalize_id(state.slot.platform, "platform"))
            except CatalogError:
                continue
        return platforms

    async def _credentials(self, secret: str, host: str) -> Credentials | None:
        try:
            data = await asyncio.to_thread(self._secrets.read, secret)
        except KubeError as exc:
            raise SourceAuthError(f"pull Secret {secret}: {exc}") from None
        if data is None:
            return None
        try:
            return credentials_from_secret(data.name, data.type, data.data, host)
        except CatalogError as exc:  # a Secret without usable credentials: the pull fails as refused
            raise SourceAuthError(str(exc)) from None

    # ------------------------------------------------------------------ early pulls
    def pod_changed(self, kind: str, pod: PodInfo) -> None:
        """The pod watch's listener: start the pulls a pod bound to this node will need."""
        if kind == "DELETED" or pod.deleted:
            self._early = {(uid, name) for uid, name in self._early if uid != pod.uid}
            return
        if self.puller is None or pod.phase in FINISHED_PHASES:
            return
        for name in annotated_bitstreams(pod):
            declaration = self.puller.declared(name)
            if declaration is not None:
                self._pull_early(pod, declaration)

    def _pull_early(self, pod: PodView, declaration: Declaration) -> None:
        key = (pod.uid, declaration.name)
        if key in self._early or declaration.platform not in self._platforms():
            return
        self._early.add(key)
        self._pull_in_background(pod, declaration)

    def _pull_in_background(self, pod: PodView | None, declaration: Declaration) -> None:
        """Start (or join) the pull; nobody waits for it here: a failure is logged when it ends."""
        assert self.puller is not None
        self._wait_for(pod, declaration.name)
        self.puller.pull(declaration.name, declaration.platform)

    def _wait_for(self, pod: PodView | None, name: str) -> None:
        """``pod`` is told (one Event) when the pull of ``name`` under way, or the next one, brings the file."""
        if pod is not None:
            self._waiters.setdefault(name, {}).setdefault(pod.uid, pod)

    def declared_accelerator(self, name: str) -> str | None:
        """The accelerator id the cluster declares for ``name`` (None when it does not declare it)."""
        declaration = None if self.puller is None else self.puller.declared(name)
        return None if declaration is None else declaration.accelerator_id

    # ------------------------------------------------------------------ on demand
    async def fetch(self, pod: PodView | None, name: str, platform: str | None, deadline: float) -> None:
        """Make a declared bitstream present (the fetch hook), waiting at most :data:`PULL_SHARE` of the time left:
        PullInProgress when that was not enough (the pull goes on), the pull's CatalogError when it failed."""
        puller = self.puller
        declaration = None if puller is None else puller.declared(name)
        if puller is None or declaration is None:
            return
        self._wait_for(pod, name)
        pull = puller.pull(name, platform)
        budget = max(0.0, (deadline - time.monotonic()) * PULL_SHARE)
        done, _ = await asyncio.wait({pull}, timeout=budget)
        if not done:
            message = (
                f"bitstream {name!r} is still being pulled from {declaration.source}; the pull goes on, "
                "and the kubelet's next attempt will find it"
            )
            await self._post(pod, "FpgaBitstreamPulling", message)
            raise PullInProgress(message)
        try:
            pull.result()
        except PullError as exc:
            await self._post(pod, "FpgaBitstreamPullFailed", str(exc), "Warning")
            raise
        except CatalogError as exc:
            await self._post(pod, "FpgaBitstreamRejected", str(exc), "Warning")
            raise

    # ------------------------------------------------------------------ pulling
    async def _pull_ended(self, ended: PullEnded) -> None:
        """The puller's listener: metrics, the log, and the Events of the pods that waited."""
        waiters = self._waiters.pop(ended.name, {})
        source = ended.declaration.source if ended.declaration is not None else "(not declared)"
        if ended.error is not None:
            if ended.needed and isinstance(ended.error, CatalogError):
                self._count(pull_result(ended.error))
            logger.warning("bitstream %s: pull from %s failed: %s", ended.name, source, ended.error)
            return
        entry = ended.pulled
        if entry is None:  # the catalog held the declared file already
            return
        self._count("pulled", entry.size)
        message = f"Pulled bitstream {entry.name} ({entry.size} bytes) from {source} in {ended.seconds:.1f} s"
        for pod in waiters.values():
            await self._post(pod, "FpgaBitstreamPulled", message)

    def _count(self, result: str, size: int = 0) -> None:
        self._metrics.bitstream_pulls.labels(result=result).inc()
        if size:
            self._metrics.bitstream_pulled_bytes.inc(size)

    async def _post(self, pod: PodView | None, reason: str, message: str, type: str = "Normal") -> None:
        if self._events is not None and pod is not None:
            await self._events.post(pod.namespace, pod.name, pod.uid, reason, message, type)
