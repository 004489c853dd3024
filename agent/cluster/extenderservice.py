"""The scheduler extender as a service (``fpga-agent extender``): its watches, its state table, its servers.

A flag whose address or files cannot be used is a ConfigError naming it, before anything listens."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import ssl
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from aiohttp import web

from agent.cluster.certs import tls_context
from agent.config import Config
from agent.config.values import ListenAddress
from agent.errors import ConfigError
from agent.extender.claimtemplates import ClaimTemplates, parse_claim_template
from agent.extender.nodestate import WatchedNode, read_published_state
from agent.extender.server import (
    Extender,
    WebhookServer,
    build_app,
    build_probe_app,
    build_webhook_app,
    extender_metrics,
    start,
    start_probe,
    start_webhook,
)
from agent.extender.table import StateTable
from agent.kube.client import connect_api
from agent.kube.reflector import Watcher
from agent.node.distribution import parse_object

logger = logging.getLogger(__name__)

_Server = TypeVar("_Server", web.AppRunner, WebhookServer)


def extender_tls(config: Config, *, client_ca: bool = True) -> ssl.SSLContext | None:
    """The TLS context of the scheduler's port, or with ``client_ca`` False of the webhook port; None without
    HTTPS. ConfigError naming the flags when the files cannot be loaded."""
    if config.tls_cert_file is None or config.tls_key_file is None:
        return None
    ca = str(config.tls_client_ca_file) if client_ca and config.tls_client_ca_file is not None else None
    try:
        return tls_context(str(config.tls_cert_file), str(config.tls_key_file), ca)
    except (OSError, ssl.SSLError) as exc:
        flags = "--tls-cert-file/--tls-key-file" + ("/--tls-client-ca-file" if client_ca else "")
        files = ", ".join(str(name) for name in (config.tls_cert_file, config.tls_key_file, ca) if name)
        raise ConfigError(f"{flags}: cannot load {files}: {exc}") from None


async def _listen(flag: str, where: ListenAddress, starting: Coroutine[Any, Any, _Server]) -> _Server:
    """The started server; a refused bind is a ConfigError naming the flag."""
    try:
        return await starting
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ConfigError(f"{flag} {where}: cannot listen: {reason}") from None


def in_namespace(namespace: str) -> Callable[[Mapping[str, Any]], WatchedNode]:
    """The watch's parser: the FpgaNodeStates of the agents of this install (``namespace``); others skipped."""

    def parse(obj: Mapping[str, Any]) -> WatchedNode:
        metadata = obj.get("metadata")
        if not isinstance(metadata, Mapping) or metadata.get("namespace") != namespace:
            raise ValueError(f"an FpgaNodeState outside namespace {namespace}")
        return read_published_state(obj)

    return parse


async def run_extender(config: Config, stop: asyncio.Event) -> None:
    """The scheduler extender until ``stop``; KubeError without API access, before anything listens."""
    tls = extender_tls(config)
    hook_tls = extender_tls(config, client_ca=False) if config.webhook_listen is not None else None
    api_client = connect_api(config.kubeconfig)
    table = StateTable()
    templates = ClaimTemplates()

    def listed(nodes: Sequence[WatchedNode]) -> None:
        """On a list of every FpgaNodeState: the table takes it, then one full collection and ``gc.freeze``, so
        that the collector's full passes no longer walk the node states inside scheduling calls."""
        table.replace_watched(nodes)
        gc.collect()
        gc.freeze()

    extender = Extender(table, config.score_weights, answer_limit=config.answer_limit, templates=templates)
    watcher = Watcher(
        api_client,
        "fpganodestates",
        parse=in_namespace(config.namespace),
        on_replace=listed,
        on_event=table.apply_watched,
        on_error=table.failed,
    )
    bitstreams = Watcher(
        api_client,
        "fpgabitstreams",
        parse=parse_object,
        on_replace=table.replace_declared,
        on_event=table.apply_declared,
        on_error=table.declarations_failed,
    )
    claim_templates = Watcher(
        api_client,
        "resourceclaimtemplates",
        parse=parse_claim_template,
        on_replace=templates.replace,
        on_event=templates.apply,
        on_error=templates.failed,
    )
    metrics = extender_metrics()
    app = build_app(extender, metrics=metrics)
    logger.info(
        "scheduler extender starting (score weights %s, %s)",
        config.score_weights,
        f"answers list at most {config.answer_limit} nodes" if config.answer_limit else "answers list every node",
    )
    # The scheduler's port first, then the probe port: the probe answering means that one listens too.
    servers: list[web.AppRunner | WebhookServer] = []
    try:
        listen = config.listen
        servers.append(await _listen("--listen", listen, start(app, listen.host, listen.port, tls)))
        if (probe := config.probe_listen) is not None:
            probing = start_probe(build_probe_app(extender, metrics), probe.host, probe.port)
            servers.append(await _listen("--probe-listen", probe, probing))
        if (hook := config.webhook_listen) is not None and hook_tls is not None:
            hooking = start_webhook(build_webhook_app(table), hook.host, hook.port, hook_tls)
            servers.append(await _listen("--webhook-listen", hook, hooking))
        async with asyncio.TaskGroup() as group:
            watches = [
                group.create_task(watcher.run(), name="node-state-watch"),
                group.create_task(bitstreams.run(), name="bitstream-watch"),
                group.create_task(claim_templates.run(), name="claim-template-watch"),
            ]
            await stop.wait()
            for watch in watches:
                watch.cancel()
    finally:
        for server in reversed(servers):
            await server.cleanup()
        await asyncio.to_thread(api_client.close)
    logger.info("scheduler extender stopped")
