"""A source that misbehaves on purpose: an OCI registry front and file server of the tests' own.

One aiohttp application served twice, over TLS (the tests' openssl certificate) and over
plain HTTP, on free local ports; both sites share the handlers and one request log. It
serves one artifact (``fpga/nlb``: a manifest whose one layer is :attr:`HostileSource.data`)
and the same bytes as a file (``/file.bin``), and can be told to:

* split the manifest or the token reply into two writes some time apart (a proxy's chunking);
* drip the blob or file a few bytes at a time, or send it without end;
* redirect the blob or file to another URL (down to plain HTTP, say);
* challenge for a bearer token from a realm of its choosing (a plain-HTTP one, say).

Used by the pull tests and by bench/soak.py's hostile-source cases.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from agent.bitstreams.registry import OCI_MANIFEST, artifact_manifest

REPOSITORY = "fpga/nlb"
TOKEN = "hostile-token"
USER, PASSWORD = "alice", "wonderland"
#: Bytes of each write when dripping or sending without end.
ENDLESS_CHUNK = 64 * 1024
#: Bytes after which even the endless body stops (a net under a client that never hangs up).
ENDLESS_LIMIT = 1 << 30


@dataclass
class HostileSource:
    data: bytes
    #: The manifest (JSON) served for any tag; None: the artifact as ``catalog push`` makes it.
    manifest: bytes | None = None
    #: Seconds between the two writes of the manifest and of the token reply (0: one write).
    split_s: float = 0.0
    #: Blob and file: ``drip_bytes`` every ``drip_interval_s`` (None: all at once).
    drip_interval_s: float | None = None
    drip_bytes: int = 1
    #: Blob and file: no Content-Length and bytes without end.
    endless: bool = False
    #: Blob and file: answered with ``302 Location: redirect_to`` (unless that is the request's own path).
    redirect_to: str | None = None
    #: Manifest and blob: without ``Bearer TOKEN``, challenged for a token from this realm.
    realm: str | None = None
    tls_port: int = 0
    plain_port: int = 0
    #: Every request as (scheme, path, Authorization header).
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    #: Bytes the blob and file handlers wrote in all.
    sent: int = 0

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def address(self, tls: bool = True) -> str:
        return f"127.0.0.1:{self.tls_port if tls else self.plain_port}"

    def url(self, path: str, tls: bool = True) -> str:
        return f"{'https' if tls else 'http'}://{self.address(tls)}/{path}"

    def manifest_body(self) -> bytes:
        if self.manifest is not None:
            return self.manifest
        return artifact_manifest("sha256:" + self.sha256, len(self.data), b"{}", "nlb.bin")

    # ------------------------------------------------------------------ handlers
    async def _log(self, request: web.Request) -> None:
        self.requests.append((request.scheme, request.path, request.headers.get("Authorization")))

    def _challenged(self, request: web.Request) -> web.Response | None:
        if self.realm is None or request.headers.get("Authorization") == f"Bearer {TOKEN}":
            return None
        header = f'Bearer realm="{self.realm}",service="hostile",scope="repository:{REPOSITORY}:pull"'
        return web.Response(status=401, headers={"WWW-Authenticate": header}, text='{"errors":[]}')

    async def manifest_handler(self, request: web.Request) -> web.StreamResponse:
        await self._log(request)
        return self._challenged(request) or await self._split(request, self.manifest_body(), OCI_MANIFEST)

    async def token_handler(self, request: web.Request) -> web.StreamResponse:
        await self._log(request)
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if request.headers.get("Authorization") != expected:
            return web.Response(status=401, text="bad credentials")
        body = b'{"token": "' + TOKEN.encode() + b'", "expires_in": 300, "padding": "' + b"x" * 8000 + b'"}'
        return await self._split(request, body, "application/json")

    async def data_handler(self, request: web.Request) -> web.StreamResponse:
        await self._log(request)
        challenged = self._challenged(request) if request.path.startswith("/v2/") else None
        if challenged is not None:
            return challenged
        if self.redirect_to is not None and not self.redirect_to.endswith(request.path):
            return web.Response(status=302, headers={"Location": self.redirect_to})
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        if not self.endless:
            response.content_length = len(self.data)
        await response.prepare(request)
        if self.endless:  # until the client goes away, which a write into a lost connection does not always raise
            while request.transport is not None and not request.transport.is_closing() and self.sent < ENDLESS_LIMIT:
                await response.write(b"\0" * ENDLESS_CHUNK)
                self.sent += ENDLESS_CHUNK
                await asyncio.sleep(0)  # let the loop tell this handler of a lost connection
            return response
        if self.drip_interval_s is None:
            await response.write(self.data)
            self.sent += len(self.data)
        else:
            for start in range(0, len(self.data), self.drip_bytes):
                if request.transport is None or request.transport.is_closing():
                    return response
                await response.write(self.data[start : start + self.drip_bytes])
                self.sent += len(self.data[start : start + self.drip_bytes])
                await asyncio.sleep(self.drip_interval_s)
        await response.write_eof()
        return response

    async def _split(self, request: web.Request, body: bytes, content_type: str) -> web.StreamResponse:
        """``body`` with its Content-Length, in two writes ``split_s`` apart."""
        response = web.StreamResponse(headers={"Content-Type": content_type})
        response.content_length = len(body)
        await response.prepare(request)
        if self.split_s <= 0:
            await response.write(body)
        else:
            half = len(body) // 2
            await response.write(body[:half])
            await asyncio.sleep(self.split_s)
            await response.write(body[half:])
        await response.write_eof()
        return response


#: A second address of the TLS server: another origin for the same server.
OTHER_ORIGIN_HOST = "127.0.0.2"


@contextlib.asynccontextmanager
async def serving_hostile(source: HostileSource, cert: Path, key: Path) -> AsyncIterator[HostileSource]:
    """Serve ``source`` over TLS and plain HTTP on free ports of 127.0.0.1 (TLS also on 127.0.0.2) until the end."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    app = web.Application()
    app.router.add_get(f"/v2/{REPOSITORY}/manifests/{{reference}}", source.manifest_handler)
    app.router.add_get(f"/v2/{REPOSITORY}/blobs/{{digest}}", source.data_handler)
    app.router.add_get("/file.bin", source.data_handler)
    app.router.add_get("/moved/file.bin", source.data_handler)
    app.router.add_get("/token", source.token_handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    tls_site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    plain_site = web.TCPSite(runner, "127.0.0.1", 0)
    await tls_site.start()
    await plain_site.start()
    try:
        ports = [int(address[1]) for address in runner.addresses]
        source.tls_port, source.plain_port = ports
        # The same TLS server as another origin (127.0.0.2, in the certificate too): a redirect across
        # origins without a name to resolve (a fresh machine may not resolve localhost).
        await web.TCPSite(runner, OTHER_ORIGIN_HOST, source.tls_port, ssl_context=context).start()
        yield source
    finally:
        await runner.cleanup()
