"""Pulls against a source that misbehaves on purpose (tests/integration/bitstreams/hostile.py), over real
TLS and plain HTTP: split writes, a drip, a body without end, redirects down to plain HTTP, a plain-HTTP
token realm. Each ends in a pull that succeeds, or in a clear error with nothing installed, no credentials
sent in clear, and the cache budget's reservation released.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from agent.bitstreams.cache import CacheBudget
from agent.bitstreams.declaration import Credentials, Declaration
from agent.bitstreams.http import HttpsSource
from agent.bitstreams.puller import BitstreamPuller
from agent.bitstreams.reference import parse_reference
from agent.bitstreams.registry import RegistryClient
from agent.errors import PulledHashMismatch, SourceAuthError, SourceUnreachable
from agent.programming.catalog import Catalog
from tests.integration.bitstreams.hostile import (
    OTHER_ORIGIN_HOST,
    PASSWORD,
    REPOSITORY,
    USER,
    HostileSource,
    serving_hostile,
)

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

DATA = bytes(range(256)) * 256  # 64 KiB
CREDENTIALS = Credentials(USER, PASSWORD)
#: The deadline of the drip test's pulls: the 64 KiB at 32 KiB/s, plus 1 s.
FLOOR_BYTES_PER_S, ALLOWANCE_S = 32 * 1024, 1.0


@pytest.fixture
async def hostile(certificate: tuple[Path, Path]) -> AsyncIterator[HostileSource]:
    async with serving_hostile(HostileSource(DATA), *certificate) as source:
        yield source


@pytest.fixture
async def hostile_puller(catalog: Catalog, session: aiohttp.ClientSession) -> AsyncIterator[BitstreamPuller]:
    """A puller of the hostile source (HTTPS; nothing configured as plain HTTP) with a short deadline."""

    async def lookup(name: str, host: str) -> Credentials | None:
        return CREDENTIALS

    puller = BitstreamPuller(
        catalog,
        RegistryClient(session),
        HttpsSource(session),
        CacheBudget(1 << 20),
        lookup,
        floor_bytes_per_s=FLOOR_BYTES_PER_S,
        allowance_s=ALLOWANCE_S,
    )
    await puller.start()
    try:
        yield puller
    finally:
        await puller.close()


def oci(source: HostileSource, secret: str | None = None) -> Declaration:
    reference = parse_reference(f"{source.address()}/{REPOSITORY}:1")
    return Declaration("nlb", "p", "a", source.sha256, len(source.data), oci=reference, pull_secret=secret)


def https(source: HostileSource, url: str | None = None, secret: str | None = None) -> Declaration:
    url = url or source.url("file.bin")
    return Declaration("nlb", "p", "a", source.sha256, len(source.data), https=url, pull_secret=secret)


def nothing_left(puller: BitstreamPuller, catalog: Catalog) -> None:
    """Nothing installed or half-written, and the budget holds no reservation."""
    assert os.listdir(catalog.directory) == []
    assert puller.budget.in_use() == set()
    assert puller.budget.used_bytes([]) == 0


# ---------------------------------------------------------------------------- split writes
def padded_manifest(source: HostileSource, size: int) -> bytes:
    """A valid artifact manifest of about ``size`` bytes (annotations make it long, as real ones can be)."""
    manifest = json.loads(source.manifest_body())
    manifest["annotations"] = {f"org.example.note.{i}": "x" * 100 for i in range(size // 130)}
    return json.dumps(manifest).encode()


async def test_a_manifest_sent_in_two_writes_is_read_whole(
    hostile: HostileSource, hostile_puller: BitstreamPuller, catalog: Catalog
) -> None:
    hostile.manifest = padded_manifest(hostile, 12 * 1024)
    assert len(hostile.manifest) > 11 * 1024
    hostile.split_s = 0.2
    hostile_puller.declare(oci(hostile))
    entry = await hostile_puller.ensure("nlb")
    assert catalog.read_image(catalog.resolve("nlb")) == DATA
    assert entry.sha256 == hostile.sha256


async def test_a_token_reply_sent_in_two_writes_is_read_whole(
    hostile: HostileSource, hostile_puller: BitstreamPuller, catalog: Catalog
) -> None:
    hostile.realm = hostile.url("token")
    hostile.split_s = 0.2
    hostile_puller.declare(oci(hostile, secret="creds"))
    assert (await hostile_puller.ensure("nlb")).sha256 == hostile.sha256
    basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert ("https", "/token", basic) in hostile.requests


async def test_a_manifest_longer_than_the_cap_is_refused_by_its_content_length(
    hostile: HostileSource, hostile_puller: BitstreamPuller, catalog: Catalog
) -> None:
    hostile.manifest = b"{" + b" " * (5 << 20) + b"}"
    hostile_puller.declare(oci(hostile))
    with pytest.raises(SourceUnreachable, match=r"the answer is 5242882 bytes, more than 4194304"):
        await hostile_puller.ensure("nlb")
    nothing_left(hostile_puller, catalog)


# ----------------------------------------------------------------------- slow and endless
@pytest.mark.parametrize("source", ["oci", "https"])
async def test_a_drip_fed_pull_ends_at_its_deadline_naming_the_source_and_rate(
    hostile: HostileSource, hostile_puller: BitstreamPuller, catalog: Catalog, source: str
) -> None:
    """256 bytes every 50 ms (about 5 KB/s, 13 s for the 64 KiB) never trips the 60 s silence limit;
    the deadline (2 s for the size at 32 KiB/s, plus 1 s) ends it."""
    hostile.drip_interval_s, hostile.drip_bytes = 0.05, 256
    declaration = oci(hostile) if source == "oci" else https(hostile)
    hostile_puller.declare(declaration)
    assert hostile_puller.deadline_s(len(DATA)) == 3.0
    message = (
        rf"bitstream 'nlb' from {declaration.source}: not pulled within its deadline of 3 s \(65536 bytes at the "
        rf"floor rate of 32768 bytes/s, plus 1 s\); the source sent \d+ bytes in \d+ s \(\d+ bytes/s\)"
    )
    with pytest.raises(SourceUnreachable, match=message):
        await hostile_puller.ensure("nlb")
    assert 0 < hostile.sent < len(DATA)
    nothing_left(hostile_puller, catalog)


@pytest.mark.parametrize("source", ["oci", "https"])
async def test_a_body_without_end_is_cut_at_the_declared_size(
    hostile: HostileSource, hostile_puller: BitstreamPuller, catalog: Catalog, source: str
) -> None:
    hostile.endless = True
    hostile_puller.declare(oci(hostile) if source == "oci" else https(hostile))
    with pytest.raises(PulledHashMismatch, match="sends more than the declared 65536 bytes"):
        await hostile_puller.ensure("nlb")
    nothing_left(hostile_puller, catalog)


# -------------------------------------------------------------------------------- redirects
async def test_an_https_file_redirected_down_to_plain_http_is_refused(
    hostile: HostileSource, hostile_puller: BitstreamPuller, catalog: Catalog
) -> None:
    hostile.redirect_to = f"http://someone:s3cret@{hostile.address(tls=False)}/file.bin"
    hostile_puller.declare(https(hostile, hostile.url("moved/file.bin")))
    with pytest.raises(SourceUnreachable, match=r"redirects to http://\*\*\*@127\.0\.0\.1:\d+/file\.bin; only https"):
        await hostile_puller.ensure("nlb")
    assert [r for r in hostile.requests if r[0] == "http"] == []
    nothing_left(hostile_puller, catalog)


async def test_a_blob_redirected_down_to_plain_http_is_refused_and_one_to_https_followed(
    hostile: HostileSource, hostile_puller: BitstreamPuller, catalog: Catalog
) -> None:
    hostile.redirect_to = hostile.url("file.bin", tls=False)
    hostile_puller.declare(oci(hostile))
    with pytest.raises(SourceUnreachable, match=r"blobs/sha256:[0-9a-f]{64} redirects to http://127\.0\.0\.1"):
        await hostile_puller.ensure("nlb")
    assert [r for r in hostile.requests if r[0] == "http"] == []
    nothing_left(hostile_puller, catalog)

    hostile.redirect_to = hostile.url("file.bin")  # to storage over HTTPS, as registries do
    assert (await hostile_puller.ensure("nlb")).sha256 == hostile.sha256
    assert hostile.requests[-1][:2] == ("https", "/file.bin")


async def test_credentials_go_only_to_the_origin_they_were_meant_for(
    hostile: HostileSource, hostile_puller: BitstreamPuller, catalog: Catalog
) -> None:
    """A redirect to another origin (here the same server at another address) is followed without them."""
    hostile.redirect_to = f"https://{OTHER_ORIGIN_HOST}:{hostile.tls_port}/file.bin"
    hostile_puller.declare(https(hostile, hostile.url("moved/file.bin"), secret="creds"))
    assert (await hostile_puller.ensure("nlb")).sha256 == hostile.sha256
    basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert hostile.requests == [("https", "/moved/file.bin", basic), ("https", "/file.bin", None)]


# ------------------------------------------------------------------------------ token realm
async def test_credentials_are_not_sent_to_a_plain_http_token_realm(
    hostile: HostileSource, hostile_puller: BitstreamPuller, catalog: Catalog
) -> None:
    hostile.realm = hostile.url("token", tls=False)
    hostile_puller.declare(oci(hostile, secret="creds"))
    refused = r"sends the credentials to the token service 'http://127\.0\.0\.1:\d+/token' over plain HTTP; refused"
    with pytest.raises(SourceAuthError, match=refused):
        await hostile_puller.ensure("nlb")
    assert [r for r in hostile.requests if r[1] == "/token"] == []
    nothing_left(hostile_puller, catalog)


async def test_a_plain_http_registry_may_use_a_plain_http_realm(
    hostile: HostileSource, catalog: Catalog, session: aiohttp.ClientSession
) -> None:
    """A registry configured as plain HTTP (in-cluster, say) sends everything in clear anyway."""
    hostile.realm = hostile.url("token", tls=False)

    async def lookup(name: str, host: str) -> Credentials | None:
        return CREDENTIALS

    registry = RegistryClient(session, [hostile.address(tls=False)])
    puller = BitstreamPuller(catalog, registry, HttpsSource(session), CacheBudget(1 << 20), lookup)
    await puller.start()
    reference = parse_reference(f"{hostile.address(tls=False)}/{REPOSITORY}:1")
    puller.declare(Declaration("nlb", "p", "a", hostile.sha256, len(DATA), oci=reference, pull_secret="creds"))
    try:
        assert (await puller.ensure("nlb")).sha256 == hostile.sha256
    finally:
        await puller.close()
    assert ("http", "/token") in [r[:2] for r in hostile.requests]


async def test_a_realm_with_userinfo_is_refused_without_showing_it(
    hostile: HostileSource, hostile_puller: BitstreamPuller, catalog: Catalog
) -> None:
    hostile.realm = f"https://eve:pa55word@{hostile.address()}/token"
    hostile_puller.declare(oci(hostile, secret="creds"))
    with pytest.raises(
        SourceAuthError, match=r"token service 'https://\*\*\*@127\.0\.0\.1:\d+/token' carries userinfo"
    ):
        await hostile_puller.ensure("nlb")
    assert [r for r in hostile.requests if r[1] == "/token"] == []
    nothing_left(hostile_puller, catalog)


async def test_userinfo_in_a_redirect_is_dropped(
    hostile: HostileSource, hostile_puller: BitstreamPuller, catalog: Catalog
) -> None:
    hostile.redirect_to = f"https://eve:pa55word@{hostile.address()}/file.bin"
    hostile_puller.declare(https(hostile, hostile.url("moved/file.bin"), secret="creds"))
    assert (await hostile_puller.ensure("nlb")).sha256 == hostile.sha256
    basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert hostile.requests == [("https", "/moved/file.bin", basic), ("https", "/file.bin", basic)]
