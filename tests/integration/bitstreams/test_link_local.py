"""Pulls never connect to link-local addresses (a cloud's metadata service) unless allowed: checked on the
address each connection uses, so a redirect there is refused as a literal source is; the CRD agrees."""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from agent.bitstreams.http import HttpsSource
from agent.bitstreams.linklocal import LINK_LOCAL_SOURCE_PATTERN, is_link_local, pull_connector, refusing_socket
from agent.config import load_config
from agent.errors import SourceUnreachable
from tests.deploy.manifests import DAEMONSET_DIR, load_documents
from tests.integration.bitstreams.servers import FileServer

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

METADATA = "https://169.254.169.254/latest/meta-data/iam/security-credentials/"


@pytest.fixture
async def pulls(certificate: tuple[Path, Path]) -> AsyncIterator[HttpsSource]:
    """The agent's pull client as shipped: link-local addresses refused."""
    trusted = ssl.create_default_context(cafile=str(certificate[0]))
    async with aiohttp.ClientSession(connector=pull_connector(trusted)) as session:
        yield HttpsSource(session)


async def read(source: HttpsSource, url: str) -> bytes:
    async with source.open(url, None) as chunks:
        return b"".join([chunk async for chunk in chunks])


@pytest.mark.parametrize(
    "url",
    [
        pytest.param(METADATA, id="ipv4-metadata"),
        pytest.param("https://[fe80::1]:8443/x.bin", id="ipv6-link-local"),
        pytest.param("https://[::ffff:169.254.169.254]/x.bin", id="ipv4-mapped"),
        pytest.param("https://[fd00:ec2::254]/latest/meta-data/", id="aws-ipv6-metadata"),
    ],
)
async def test_a_link_local_source_is_refused_naming_the_address_and_the_option(pulls: HttpsSource, url: str) -> None:
    with pytest.raises(SourceUnreachable, match=r"is a link-local address .* unless --bitstream-allow-link-local"):
        await read(pulls, url)


async def test_a_redirect_to_a_link_local_address_is_refused(
    pulls: HttpsSource, file_server: FileServer, certificate: tuple[Path, Path]
) -> None:
    """A source that is fine in itself redirects to the metadata service: the hop is refused before it connects."""
    file_server.files["nlb.bin"] = b"bitstream"
    assert await read(pulls, file_server.url("nlb.bin")) == b"bitstream"  # ordinary sources still pulled

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(METADATA)

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    app = web.Application()
    app.router.add_get("/{path:.+}", redirect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    try:
        port = int(runner.addresses[0][1])
        with pytest.raises(SourceUnreachable, match=r"169\.254\.169\.254 is a link-local address"):
            await read(pulls, f"https://127.0.0.1:{port}/nlb.bin")
    finally:
        await runner.cleanup()


def test_other_addresses_get_their_socket_and_the_option_is_read() -> None:
    with refusing_socket((socket.AF_INET, socket.SOCK_STREAM, 0, "", ("10.1.2.3", 443))) as made:
        assert made.family == socket.AF_INET
    with pytest.raises(OSError, match=r"169\.254\.0\.1 is a link-local address"):
        refusing_socket((socket.AF_INET, socket.SOCK_STREAM, 0, "", ("169.254.0.1", 443)))
    assert load_config({}, env={}).bitstream_allow_link_local is False
    assert load_config({}, env={"FPGA_AGENT_BITSTREAM_ALLOW_LINK_LOCAL": "true"}).bitstream_allow_link_local


SOURCES = [
    ("https://169.254.169.254/x", "169.254.169.254", True),
    ("169.254.1.2:5000/fpga/nlb:1", "169.254.1.2", True),
    ("https://[fe80::1]/x", "[fe80::1]", True),
    ("https://[FEBF:0::1]:8443/x", "[FEBF:0::1]", True),
    ("https://[::ffff:169.254.9.9]/x", "[::ffff:169.254.9.9]", True),
    ("https://[fec0::1]/x", "[fec0::1]", False),
    ("https://[fe8::1]/x", "[fe8::1]", False),
    ("https://169.25.1.1/x", "169.25.1.1", False),
    ("https://files.example.com/x", "files.example.com", False),
    ("registry.example.com:5000/fpga/nlb:1", "registry.example.com", False),
    ("https://10.0.0.1/x", "10.0.0.1", False),
]


def crd_rules() -> dict[str, str]:
    (document,) = load_documents(DAEMONSET_DIR / "fpgabitstream-crd.yaml")
    (version,) = document["spec"]["versions"]
    source = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["source"]["properties"]
    found = {}
    for field in ("oci", "https"):
        (rule,) = source[field]["x-kubernetes-validations"]
        match = re.fullmatch(r"!self\.matches\('(.*)'\)", rule["rule"].strip())
        assert match, rule
        found[field] = match.group(1).replace("\\\\", "\\")  # a CEL string literal: \\ is one backslash
    return found


@pytest.mark.parametrize(("source", "host", "link_local"), SOURCES)
def test_the_crd_refuses_the_literal_link_local_sources_the_agent_refuses(
    source: str, host: str, link_local: bool
) -> None:
    rules = crd_rules()
    assert rules == {"oci": LINK_LOCAL_SOURCE_PATTERN, "https": LINK_LOCAL_SOURCE_PATTERN}
    assert (re.search(rules["https"], source) is not None) == link_local == is_link_local(host)
