"""Pulling from a real HTTPS server (TLS with a certificate made by openssl): verify, authenticate, refuse."""

from __future__ import annotations

import hashlib
import os
import resource
import signal
import ssl

import aiohttp
import pytest

from agent.bitstreams.cache import CacheBudget
from agent.bitstreams.declaration import Credentials, Declaration
from agent.bitstreams.http import HttpsSource
from agent.bitstreams.puller import BitstreamPuller
from agent.bitstreams.registry import RegistryClient
from agent.errors import PulledHashMismatch, PullStorageError, SourceAuthError, SourceNotFound, SourceUnreachable
from agent.programming.catalog import Catalog
from tests.integration.bitstreams.servers import FileServer

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

DATA = bytes(range(256)) * 256
SHA = hashlib.sha256(DATA).hexdigest()


def declaration(server: FileServer, path: str = "nlb.bin", secret: str | None = None) -> Declaration:
    return Declaration("nlb", "p", "a", SHA, len(DATA), https=server.url(path), pull_secret=secret)


async def test_a_file_is_pulled_over_https_and_verified(
    puller: BitstreamPuller, catalog: Catalog, file_server: FileServer
) -> None:
    file_server.files["nlb.bin"] = DATA
    puller.declare(declaration(file_server))
    entry = await puller.ensure("nlb")
    assert entry.source == file_server.url("nlb.bin")
    assert catalog.read_image(catalog.resolve("nlb")) == DATA


async def test_a_pull_the_node_cannot_store_is_named_and_leaves_no_temp_file(
    puller: BitstreamPuller, catalog: Catalog, file_server: FileServer
) -> None:
    """The file system refuses the write half way (a file size limit: EFBIG, as a full disk gives ENOSPC)."""
    file_server.files["nlb.bin"] = DATA
    puller.declare(declaration(file_server))
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of the process dying
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(DATA) // 2, hard))
    try:
        with pytest.raises(PullStorageError, match=r"bitstream 'nlb' from https://\S+: the node could not store it: "):
            await puller.ensure("nlb")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    assert os.listdir(catalog.directory) == []
    entry = await puller.ensure("nlb")  # the disk has room again: the next attempt pulls it
    assert entry.size == len(DATA)


async def test_a_tampered_file_is_refused_and_nothing_is_left(
    puller: BitstreamPuller, catalog: Catalog, file_server: FileServer
) -> None:
    file_server.files["nlb.bin"] = DATA[:-1] + b"?"
    puller.declare(declaration(file_server))
    with pytest.raises(PulledHashMismatch, match=f"declaration says {SHA}"):
        await puller.ensure("nlb")
    file_server.files["nlb.bin"] = DATA + b"more"
    with pytest.raises(PulledHashMismatch, match="more than the declared 65536 bytes"):
        await puller.ensure("nlb")
    assert os.listdir(catalog.directory) == []


@pytest.mark.parametrize(
    ("secret", "outcome"),
    [
        pytest.param("right", None, id="right"),
        pytest.param("wrong", "HTTP 401", id="wrong"),
        pytest.param(None, "HTTP 401", id="none"),
    ],
)
async def test_basic_credentials_from_the_pull_secret(
    puller: BitstreamPuller, catalog: Catalog, file_server: FileServer, secret: str | None, outcome: str | None
) -> None:
    file_server.files["nlb.bin"] = DATA
    file_server.basic = ("alice", "wonderland")
    puller.declare(declaration(file_server, secret=secret))
    if outcome is None:
        assert (await puller.ensure("nlb")).sha256 == SHA
        return
    with pytest.raises(SourceAuthError, match=outcome):
        await puller.ensure("nlb")
    assert os.listdir(catalog.directory) == []


async def test_a_bearer_token_from_the_pull_secret(
    puller: BitstreamPuller, file_server: FileServer, secrets: dict[str, Credentials]
) -> None:
    secrets["token"] = Credentials(token="t-123")
    file_server.files["nlb.bin"] = DATA
    file_server.token = "t-123"
    puller.declare(declaration(file_server, secret="token"))
    assert (await puller.ensure("nlb")).sha256 == SHA


async def test_a_missing_file_is_not_found(puller: BitstreamPuller, file_server: FileServer) -> None:
    puller.declare(declaration(file_server, path="gone.bin"))
    with pytest.raises(SourceNotFound, match=r"gone\.bin: not found"):
        await puller.ensure("nlb")


async def test_an_untrusted_certificate_is_refused(catalog: Catalog, file_server: FileServer) -> None:
    file_server.files["nlb.bin"] = DATA
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl.create_default_context())) as session:
        puller = BitstreamPuller(catalog, RegistryClient(session), HttpsSource(session), CacheBudget(1 << 20))
        await puller.start()
        puller.declare(declaration(file_server))
        with pytest.raises(SourceUnreachable, match="TLS failed"):
            await puller.ensure("nlb")
        await puller.close()
    assert file_server.requests == 0
    assert os.listdir(catalog.directory) == []
