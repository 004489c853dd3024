"""The Docker token protocol (``WWW-Authenticate: Bearer realm=...``), as hosted registries speak it.

The Debian registry package can only do basic auth without a token service of its
own, so this is a small registry front over real HTTP: manifests and blobs of one
artifact behind bearer tokens, and the token endpoint that issues them for basic
credentials and the asked scope.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from agent.bitstreams.cache import CacheBudget
from agent.bitstreams.declaration import Credentials, Declaration
from agent.bitstreams.http import HttpsSource
from agent.bitstreams.puller import BitstreamPuller
from agent.bitstreams.reference import parse_reference
from agent.bitstreams.registry import RegistryClient, artifact_manifest
from agent.errors import SourceAuthError
from agent.programming.catalog import Catalog

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

DATA = b"bitstream behind a token service" * 100
SHA = hashlib.sha256(DATA).hexdigest()
REPOSITORY = "fpga/nlb"
TOKEN = "issued-token"
STATIC_TOKEN = "static-token"


@dataclass
class TokenRegistry:
    port: int = 0
    token_requests: list[dict[str, str]] = field(default_factory=list)
    #: What the token service answers instead of a token (a login page behind a proxy, say).
    token_body: bytes | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def challenge(self) -> web.Response:
        realm = f"http://{self.address}/token"
        header = f'Bearer realm="{realm}",service="test-registry",scope="repository:{REPOSITORY}:pull"'
        return web.Response(status=401, headers={"WWW-Authenticate": header}, text='{"errors":[]}')

    async def manifest(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") not in (f"Bearer {TOKEN}", f"Bearer {STATIC_TOKEN}"):
            return self.challenge()
        body = artifact_manifest("sha256:" + SHA, len(DATA), b"{}", "nlb.bin")
        return web.Response(body=body, content_type="application/vnd.oci.image.manifest.v1+json")

    async def blob(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") not in (f"Bearer {TOKEN}", f"Bearer {STATIC_TOKEN}"):
            return self.challenge()
        return web.Response(body=DATA, content_type="application/octet-stream")

    async def token(self, request: web.Request) -> web.Response:
        self.token_requests.append(dict(request.query))
        expected = "Basic " + base64.b64encode(b"alice:wonderland").decode()
        if request.headers.get("Authorization") != expected:
            return web.Response(status=401, text="bad credentials")
        if request.query.get("scope") != f"repository:{REPOSITORY}:pull":
            return web.Response(status=403, text="scope")
        if self.token_body is not None:
            return web.Response(body=self.token_body, content_type="text/html")
        return web.json_response({"token": TOKEN, "expires_in": 300})


@pytest.fixture
async def token_registry() -> AsyncIterator[TokenRegistry]:
    registry = TokenRegistry()
    app = web.Application()
    app.router.add_get(f"/v2/{REPOSITORY}/manifests/{{reference}}", registry.manifest)
    app.router.add_get(f"/v2/{REPOSITORY}/blobs/{{digest}}", registry.blob)
    app.router.add_get("/token", registry.token)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        registry.port = int(runner.addresses[0][1])
        yield registry
    finally:
        await runner.cleanup()


async def pull(registry: TokenRegistry, catalog: Catalog, credentials: Credentials | None) -> None:
    async def lookup(name: str, host: str) -> Credentials | None:
        assert host == registry.address
        return credentials

    async with aiohttp.ClientSession() as session:
        puller = BitstreamPuller(
            catalog, RegistryClient(session, [registry.address]), HttpsSource(session), CacheBudget(1 << 20), lookup
        )
        await puller.start()
        reference = parse_reference(f"{registry.address}/{REPOSITORY}:1")
        puller.declare(Declaration("nlb", "p", "a", SHA, len(DATA), oci=reference, pull_secret="creds"))
        try:
            await puller.ensure("nlb")
        finally:
            await puller.close()


async def test_a_token_is_fetched_with_the_secrets_credentials_for_the_challenged_scope(
    token_registry: TokenRegistry, catalog: Catalog
) -> None:
    await pull(token_registry, catalog, Credentials("alice", "wonderland"))
    assert catalog.read_image(catalog.resolve("nlb")) == DATA
    assert token_registry.token_requests[0] == {"scope": f"repository:{REPOSITORY}:pull", "service": "test-registry"}


async def test_a_static_token_is_sent_as_it_is(token_registry: TokenRegistry, catalog: Catalog) -> None:
    await pull(token_registry, catalog, Credentials(token=STATIC_TOKEN))
    assert token_registry.token_requests == []
    assert catalog.find("nlb") is not None


async def test_credentials_the_token_service_refuses(token_registry: TokenRegistry, catalog: Catalog) -> None:
    refused = r"token from http://127\.0\.0\.1:\d+/token: the credentials were refused"
    with pytest.raises(SourceAuthError, match=refused):
        await pull(token_registry, catalog, Credentials("alice", "looking-glass"))
    assert os.listdir(catalog.directory) == []


@pytest.mark.parametrize("body", [b"<html>sign in</html>", b"\xff\xfe not text"], ids=["html", "not-utf8"])
async def test_a_token_service_that_does_not_answer_json_is_named(
    token_registry: TokenRegistry, catalog: Catalog, body: bytes
) -> None:
    token_registry.token_body = body
    with pytest.raises(SourceAuthError, match=r"the token service http://127\.0\.0\.1:\d+/token did not answer JSON"):
        await pull(token_registry, catalog, Credentials("alice", "wonderland"))
    assert os.listdir(catalog.directory) == []
