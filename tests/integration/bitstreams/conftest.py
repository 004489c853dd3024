"""Fixtures of the pull tests: real registries (open and with basic auth), a real HTTPS server, a puller."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from agent.bitstreams.cache import CacheBudget
from agent.bitstreams.declaration import Credentials
from agent.bitstreams.http import HttpsSource
from agent.bitstreams.puller import BitstreamPuller
from agent.bitstreams.registry import RegistryClient
from agent.programming.catalog import Catalog
from tests.integration.bitstreams.servers import FileServer, Registry, make_certificate, running_registry, serving_files

USERS = {"alice": "wonderland"}
RIGHT = Credentials(username="alice", password="wonderland")
WRONG = Credentials(username="alice", password="looking-glass")
#: The test puller's cache budget: room for two of the test files (each 64 KiB) and a bit.
BUDGET_BYTES = 160 * 1024


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with running_registry(tmp_path_factory.mktemp("registry")) as running:
        yield running


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with running_registry(tmp_path_factory.mktemp("auth-registry"), users=USERS) as running:
        yield running


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def file_server(certificate: tuple[Path, Path]) -> AsyncIterator[FileServer]:
    async with serving_files(FileServer(), *certificate) as server:
        yield server


@pytest.fixture
async def session(certificate: tuple[Path, Path]) -> AsyncIterator[aiohttp.ClientSession]:
    """The agent's HTTP client, trusting the test server's certificate."""
    trusted = ssl.create_default_context(cafile=str(certificate[0]))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trusted)) as client:
        yield client


@pytest.fixture
def plain_http(registry: Registry, auth_registry: Registry) -> list[str]:
    return [registry.address, auth_registry.address, "127.0.0.1:1"]


@pytest.fixture
def secrets() -> dict[str, Credentials]:
    """Pull Secrets by name, as the agent would read them from its namespace."""
    return {"right": RIGHT, "wrong": WRONG}


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return Catalog(tmp_path / "catalog")


@pytest.fixture
def in_use() -> set[str]:
    """The bitstreams the test puller's cache must keep, as the agent's ``in_use`` callback names them."""
    return set()


@pytest.fixture
async def puller(
    catalog: Catalog,
    session: aiohttp.ClientSession,
    plain_http: list[str],
    secrets: dict[str, Credentials],
    in_use: set[str],
) -> AsyncIterator[BitstreamPuller]:
    async def lookup(name: str, host: str) -> Credentials | None:
        assert host in plain_http or host.startswith("127.0.0.1:")
        return secrets.get(name)

    running = BitstreamPuller(
        catalog,
        RegistryClient(session, plain_http),
        HttpsSource(session),
        CacheBudget(BUDGET_BYTES, in_use=lambda: in_use),
        lookup,
    )
    await running.start()
    try:
        yield running
    finally:
        await running.close()
