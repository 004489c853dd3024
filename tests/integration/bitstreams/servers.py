"""Real servers for the pull tests: the CNCF distribution registry (Debian's ``docker-registry``) and an
HTTPS file server with a self-signed certificate (made by openssl).

Both listen on 127.0.0.1 on a free port and keep everything in a temp directory.
The registry can require basic auth from an htpasswd file (bcrypt, made by
``htpasswd`` from apache2-utils), as a real deployment would. scripts/setup installs
both packages; a machine without them fails these tests loudly instead of skipping.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

#: How many times (0.05 s apart) to ask a starting registry whether it answers.
READY_POLLS = 400


def plain_env() -> dict[str, str]:
    """The environment without umockdev's preload (the gate runs pytest under umockdev-wrapper)."""
    return {key: value for key, value in os.environ.items() if key not in ("LD_PRELOAD", "UMOCKDEV_DIR")}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def require(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.fail(f"{binary} is missing: install the Debian package {package} (scripts/setup does)")
    return path


@dataclass
class Registry:
    """A running registry: its address (host:port) and storage directory."""

    address: str
    storage: Path
    process: subprocess.Popen[bytes]

    def blob_data(self, digest: str) -> Path:
        """The file in the registry's storage that holds a blob (to tamper with it)."""
        hex_digest = digest.removeprefix("sha256:")
        return self.storage / "docker/registry/v2/blobs/sha256" / hex_digest[:2] / hex_digest / "data"


@contextlib.contextmanager
def running_registry(directory: Path, users: dict[str, str] | None = None) -> Iterator[Registry]:
    """Start ``docker-registry serve`` on a free port; with ``users``, require basic auth."""
    binary = require("docker-registry", "docker-registry")
    port = free_port()
    storage = directory / "storage"
    config = [
        "version: 0.1",
        "log: {level: error, accesslog: {disabled: true}}",
        f"storage: {{filesystem: {{rootdirectory: {storage}}}, delete: {{enabled: true}}}}",
        f"http: {{addr: '127.0.0.1:{port}', secret: test-secret}}",
    ]
    if users:
        htpasswd = require("htpasswd", "apache2-utils")
        lines = [
            subprocess.run(
                [htpasswd, "-Bbn", user, secret], check=True, capture_output=True, text=True, env=plain_env()
            ).stdout.strip()
            for user, secret in users.items()
        ]
        (directory / "htpasswd").write_text("\n".join(lines) + "\n")
        config.append(f"auth: {{htpasswd: {{realm: test, path: {directory / 'htpasswd'}}}}}")
    (directory / "config.yml").write_text("\n".join(config) + "\n")
    log = (directory / "registry.log").open("wb")
    process = subprocess.Popen(
        [binary, "serve", str(directory / "config.yml")], stdout=log, stderr=log, env=plain_env()
    )
    try:
        _wait_until_answering(f"http://127.0.0.1:{port}/v2/", process, directory / "registry.log")
        yield Registry(f"127.0.0.1:{port}", storage, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _wait_until_answering(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    for _ in range(READY_POLLS):
        if process.poll() is not None:
            pytest.fail(f"docker-registry exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return  # 401: it answers, and asks for credentials
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"docker-registry did not answer at {url}: {log.read_text()[-2000:]}")


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, 127.0.0.2 and localhost, and its key."""
    require("openssl", "openssl")
    cert, key = directory / "server.crt", directory / "server.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,IP:127.0.0.2,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        env=plain_env(),
    )  # fmt: skip
    return cert, key


@dataclass
class FileServer:
    """An HTTPS server of in-memory files; with ``token`` or ``basic``, requests must carry them."""

    files: dict[str, bytes] = field(default_factory=dict)
    token: str | None = None
    basic: tuple[str, str] | None = None
    port: int = 0
    requests: int = 0

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}/{path}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        expected = None
        if self.token:
            expected = f"Bearer {self.token}"
        elif self.basic:
            expected = "Basic " + base64.b64encode(f"{self.basic[0]}:{self.basic[1]}".encode()).decode()
        if expected is not None and request.headers.get("Authorization") != expected:
            return web.Response(status=401, text="who are you?")
        data = self.files.get(request.match_info["path"])
        if data is None:
            return web.Response(status=404, text="no such file")
        return web.Response(body=data, content_type="application/octet-stream")


@contextlib.asynccontextmanager
async def serving_files(server: FileServer, cert: Path, key: Path) -> AsyncIterator[FileServer]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    app = web.Application()
    app.router.add_get("/{path:.+}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    try:
        server.port = int(runner.addresses[0][1])
        yield server
    finally:
        await runner.cleanup()
