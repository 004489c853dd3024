"""The extender over TLS with client certificates, as kube-scheduler's extender tlsConfig uses it: real
certificates (made by openssl), real handshakes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.cluster.certs import tls_context
from agent.cluster.extenderservice import extender_tls
from agent.config import load_config
from agent.errors import ConfigError
from agent.extender.scoring import ScoreWeights
from agent.extender.server import Extender, bound_port, build_app, start
from agent.extender.table import StateTable
from tests.integration.extender.conftest import pod

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA; a server certificate for 127.0.0.1; a client certificate from the CA and one from another CA."""
    d = tmp_path_factory.mktemp("pki")
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={ca}",
                "-keyout", f"{ca}.key", "-out", f"{ca}.crt", cwd=d)  # fmt: skip
    for name, ca, extra in (
        ("server", "ca", "subjectAltName=IP:127.0.0.1"),
        ("client", "ca", "extendedKeyUsage=clientAuth"),
        ("stranger", "other-ca", "extendedKeyUsage=clientAuth"),
    ):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", cwd=d)  # fmt: skip
        (d / f"{name}.ext").write_text(extra + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
                "-days", "1", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=d)  # fmt: skip
    return d


@pytest.fixture
async def https_port(pki: Path) -> AsyncIterator[int]:
    cache = StateTable()
    cache.replace({})
    tls = tls_context(str(pki / "server.crt"), str(pki / "server.key"), str(pki / "ca.crt"))
    server = await start(build_app(Extender(cache, ScoreWeights())), "127.0.0.1", 0, tls)
    try:
        yield bound_port(server)
    finally:
        await server.cleanup()


async def prioritize(port: int, context: ssl.SSLContext | None, server_hostname: str | None = None) -> int:
    """Status of one prioritize call over TLS with ``context`` (or plain TCP with None), checking the server's
    certificate against ``server_hostname`` (default: 127.0.0.1)."""
    body = json.dumps({"Pod": pod("aes"), "NodeNames": ["a"]}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=server_hostname)
    try:
        writer.write(
            b"POST /prioritize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        async with asyncio.timeout(5):
            status_line = await reader.readline()
        if not status_line:
            raise ConnectionResetError("closed without an answer")
        return int(status_line.split()[1])
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()


def client_context(pki: Path, cert: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if cert is not None:
        context.load_cert_chain(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))
    return context


async def test_a_client_with_a_certificate_from_the_ca_is_served(https_port: int, pki: Path) -> None:
    assert await prioritize(https_port, client_context(pki, "client")) == 200


@pytest.mark.parametrize("cert", [None, "stranger"], ids=["no-certificate", "certificate-of-another-ca"])
async def test_a_client_without_a_trusted_certificate_is_refused(https_port: int, pki: Path, cert: str | None) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await prioritize(https_port, client_context(pki, cert))


async def test_plain_http_gets_no_answer(https_port: int) -> None:
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError)):
        await prioritize(https_port, None)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        pytest.param({"tls_cert_file": "/x.crt"}, r"give both \(HTTPS\) or neither", id="cert-without-key"),
        pytest.param({"tls_client_ca_file": "/ca.crt"}, "over HTTPS only", id="client-ca-without-cert"),
    ],
)
def test_incomplete_tls_settings_are_refused_naming_the_flags(flags: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(flags, env={})


def test_unreadable_tls_files_are_a_start_up_error_naming_the_flags(tmp_path: Path) -> None:
    config = load_config({"tls_cert_file": str(tmp_path / "no.crt"), "tls_key_file": str(tmp_path / "no.key")}, env={})
    with pytest.raises(ConfigError, match="--tls-cert-file/--tls-key-file/--tls-client-ca-file: cannot load"):
        extender_tls(config)
