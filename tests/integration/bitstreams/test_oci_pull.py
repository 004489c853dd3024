"""Pulling from a real OCI registry (CNCF distribution): push, pull, verify; every failure leaves nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
from pathlib import Path

import aiohttp
import pytest

from agent.bitstreams.declaration import Credentials, Declaration
from agent.bitstreams.publish import push_bitstream
from agent.bitstreams.puller import BitstreamPuller
from agent.bitstreams.reference import parse_reference
from agent.bitstreams.registry import RegistryClient
from agent.errors import (
    DeclarationConflict,
    PulledHashMismatch,
    PulledPlatformMismatch,
    SourceAuthError,
    SourceNotFound,
    SourceUnreachable,
    UndeclaredBitstream,
)
from agent.programming.catalog import Catalog
from tests.integration.bitstreams.conftest import RIGHT
from tests.integration.bitstreams.servers import Registry
from tests.unit.programming.gbs_files import ACCELERATOR_ID, INTERFACE_ID, build_gbs

pytestmark = pytest.mark.usefixtures("no_leaked_tasks")

PLATFORM = "9a3d7c8e11114f0a8d1b0123456789ab"
SIZE = 64 * 1024


def content(seed: str, size: int = SIZE) -> bytes:
    block = hashlib.sha256(seed.encode()).digest()
    return (block * (size // len(block) + 1))[:size]


async def push(
    session: aiohttp.ClientSession,
    registry: Registry,
    tmp_path: Path,
    name: str,
    data: bytes,
    credentials: Credentials | None = None,
    platform: str = PLATFORM,
    accelerator: str = "sim-accel",
) -> Declaration:
    path = tmp_path / f"{name}.bin"
    path.write_bytes(data)
    reference = parse_reference(f"{registry.address}/fpga/{name}:1.0")
    client = RegistryClient(session, [registry.address])
    return await push_bitstream(client, path, name, platform, accelerator, reference, credentials)


def listing(catalog: Catalog) -> list[str]:
    return sorted(os.listdir(catalog.directory))


async def test_a_pushed_artifact_is_pulled_verified_and_in_the_catalog(
    puller: BitstreamPuller, catalog: Catalog, session: aiohttp.ClientSession, registry: Registry, tmp_path: Path
) -> None:
    data = content("nlb")
    declaration = await push(session, registry, tmp_path, "nlb", data)
    assert declaration.oci is not None
    assert declaration.oci.digest is not None  # pinned to what was pushed
    assert (declaration.sha256, declaration.size) == (hashlib.sha256(data).hexdigest(), len(data))
    puller.declare(declaration)

    entry = await puller.ensure("nlb", platform=PLATFORM.upper())
    assert (entry.name, entry.sha256, entry.size) == ("nlb", declaration.sha256, len(data))
    assert entry.source == declaration.source
    assert catalog.read_image(catalog.resolve("nlb")) == data
    assert listing(catalog) == sorted([f"nlb.{declaration.sha256[:12]}.bin", "nlb.json"])
    assert await puller.ensure("nlb") == entry  # present: no second pull


async def test_a_tampered_blob_is_refused_and_nothing_is_left(
    puller: BitstreamPuller, catalog: Catalog, session: aiohttp.ClientSession, registry: Registry, tmp_path: Path
) -> None:
    data = content("tamper")
    declaration = await push(session, registry, tmp_path, "tamper", data)
    stored = registry.blob_data("sha256:" + declaration.sha256)
    stored.write_bytes(data[:-1] + b"!")  # same size, one byte changed, behind the registry's back
    puller.declare(declaration)

    with pytest.raises(PulledHashMismatch, match=f"the declaration says {declaration.sha256}"):
        await puller.ensure("tamper")
    assert listing(catalog) == []

    stored.write_bytes(data)  # the next attempt starts clean and succeeds
    assert (await puller.ensure("tamper")).sha256 == declaration.sha256


async def test_an_artifact_that_differs_from_its_declaration_is_refused_before_download(
    puller: BitstreamPuller, catalog: Catalog, session: aiohttp.ClientSession, registry: Registry, tmp_path: Path
) -> None:
    declaration = await push(session, registry, tmp_path, "other", content("other"))
    puller.declare(dataclasses.replace(declaration, sha256="0" * 64))
    with pytest.raises(PulledHashMismatch, match="the declaration says 65536 bytes with sha256 0000"):
        await puller.ensure("other")
    assert listing(catalog) == []


async def test_the_slot_platform_and_the_gbs_header_must_fit(
    puller: BitstreamPuller, catalog: Catalog, session: aiohttp.ClientSession, registry: Registry, tmp_path: Path
) -> None:
    declaration = await push(session, registry, tmp_path, "nlb", content("nlb"))
    puller.declare(declaration)
    with pytest.raises(PulledPlatformMismatch, match=f"declared for platform {PLATFORM}, the slot has {'f' * 32}"):
        await puller.ensure("nlb", platform="f" * 32)

    gbs = build_gbs()
    lying = await push(session, registry, tmp_path, "gbs", gbs, platform="1" * 32, accelerator=ACCELERATOR_ID)
    puller.declare(lying)
    with pytest.raises(PulledPlatformMismatch, match=f"declared platform {'1' * 32} differs from the GBS header's"):
        await puller.ensure("gbs")
    assert listing(catalog) == []

    honest = await push(session, registry, tmp_path, "gbs", gbs, platform=INTERFACE_ID, accelerator=ACCELERATOR_ID)
    puller.declare(honest)
    assert (await puller.ensure("gbs", platform=INTERFACE_ID)).sha256 == honest.sha256


async def test_credentials_from_the_pull_secret(
    puller: BitstreamPuller,
    catalog: Catalog,
    session: aiohttp.ClientSession,
    auth_registry: Registry,
    tmp_path: Path,
) -> None:
    declaration = await push(session, auth_registry, tmp_path, "private", content("private"), credentials=RIGHT)
    for secret, message in (
        (None, "the registry asks for credentials"),
        ("wrong", "the credentials were refused"),
        ("missing", "asks for credentials.*its pull Secret 'missing' is not in the agent's namespace"),
    ):
        puller.declare(dataclasses.replace(declaration, pull_secret=secret))
        with pytest.raises(SourceAuthError, match=message):
            await puller.ensure("private")
        assert listing(catalog) == []
    puller.declare(dataclasses.replace(declaration, pull_secret="right"))
    assert (await puller.ensure("private")).sha256 == declaration.sha256


async def test_pushing_with_wrong_credentials_is_refused(
    session: aiohttp.ClientSession, auth_registry: Registry, tmp_path: Path
) -> None:
    with pytest.raises(SourceAuthError, match="refused"):
        await push(session, auth_registry, tmp_path, "x", b"x", credentials=Credentials("alice", "nope"))


async def test_an_unreachable_registry_and_a_missing_tag_are_named(
    puller: BitstreamPuller, catalog: Catalog, registry: Registry
) -> None:
    declaration = Declaration("gone", PLATFORM, "a", "0" * 64, 10, oci=parse_reference("127.0.0.1:1/fpga/gone:1"))
    puller.declare(declaration)
    with pytest.raises(SourceUnreachable, match=r"OCI artifact 127.0.0.1:1/fpga/gone:1: cannot connect"):
        await puller.ensure("gone")
    puller.declare(dataclasses.replace(declaration, oci=parse_reference(f"{registry.address}/fpga/never:1")))
    with pytest.raises(SourceNotFound, match="not found"):
        await puller.ensure("gone")
    assert listing(catalog) == []


async def test_a_digest_the_registry_lacks_is_not_found(
    puller: BitstreamPuller, session: aiohttp.ClientSession, registry: Registry, tmp_path: Path
) -> None:
    declaration = await push(session, registry, tmp_path, "pinned", content("pinned"))
    assert declaration.oci is not None
    wrong_digest = dataclasses.replace(declaration.oci, tag=None, digest="sha256:" + "0" * 64)
    puller.declare(dataclasses.replace(declaration, oci=wrong_digest))
    with pytest.raises(SourceNotFound, match=f"OCI artifact {wrong_digest}: not found"):
        await puller.ensure("pinned")


async def test_unknown_names_and_conflicting_local_entries(
    puller: BitstreamPuller, catalog: Catalog, session: aiohttp.ClientSession, registry: Registry, tmp_path: Path
) -> None:
    with pytest.raises(UndeclaredBitstream, match="neither in this node's catalog nor declared"):
        await puller.ensure("nobody")
    local = tmp_path / "local.bin"
    local.write_bytes(content("local"))
    catalog.add(local, "local", platform=PLATFORM, accelerator_id="a")
    assert (await puller.ensure("local")).source == ""  # undeclared: the local entry serves
    declaration = await push(session, registry, tmp_path, "local", content("cluster"))
    puller.declare(declaration)
    with pytest.raises(DeclarationConflict, match="remove one of them or make them the same file"):
        await puller.ensure("local")
    same = await push(session, registry, tmp_path, "local", content("local"))
    puller.declare(same)
    assert (await puller.ensure("local")).source == ""  # same hash: the local entry wins


async def test_concurrent_asks_share_one_pull(
    puller: BitstreamPuller, catalog: Catalog, session: aiohttp.ClientSession, registry: Registry, tmp_path: Path
) -> None:
    puller.declare(await push(session, registry, tmp_path, "shared", content("shared")))
    first, second = await asyncio.gather(puller.ensure("shared"), puller.ensure("shared"))
    assert first == second
    assert len(listing(catalog)) == 2


#: The empty config oras writes (``{}``) and its digest.
ORAS_EMPTY_CONFIG = b"{}"


def oras_manifest(layer_digest: str, size: int, image_spec: str) -> bytes:
    """The manifest ``oras push registry/repo:tag nlb.bin`` writes (oras 1.x): with ``--image-spec v1.0``
    no artifactType, an ``application/vnd.unknown.config.v1+json`` config; by default (v1.1) the artifact
    type ``application/vnd.unknown.artifact.v1`` and the empty config. Either way one layer of media type
    ``application/vnd.oci.image.layer.v1.tar`` titled with the file name."""
    config_type = (
        "application/vnd.unknown.config.v1+json" if image_spec == "v1.0" else "application/vnd.oci.empty.v1+json"
    )
    manifest: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": config_type,
            "digest": "sha256:" + hashlib.sha256(ORAS_EMPTY_CONFIG).hexdigest(),
            "size": len(ORAS_EMPTY_CONFIG),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer_digest,
                "size": size,
                "annotations": {"org.opencontainers.image.title": "nlb.bin"},
            }
        ],
        "annotations": {"org.opencontainers.image.created": "2026-11-26T00:00:00Z"},
    }
    if image_spec == "v1.1":
        manifest["artifactType"] = "application/vnd.unknown.artifact.v1"
    return json.dumps(manifest, indent=3).encode()  # oras indents with three spaces


@pytest.mark.parametrize("image_spec", ["v1.0", "v1.1"], ids=["oras-no-artifact-type", "oras-default"])
async def test_an_artifact_pushed_by_oras_is_pulled(
    puller: BitstreamPuller,
    catalog: Catalog,
    session: aiohttp.ClientSession,
    registry: Registry,
    tmp_path: Path,
    image_spec: str,
) -> None:
    """Another tool's artifact: any config and artifact type, the bitstream as the one layer."""
    data = content(f"oras-{image_spec}")
    sha256 = hashlib.sha256(data).hexdigest()
    reference = parse_reference(f"{registry.address}/fpga/oras-{image_spec.replace('.', '-')}:1")
    client = RegistryClient(session, [registry.address])
    await client.push_blob(
        reference, ORAS_EMPTY_CONFIG, "sha256:" + hashlib.sha256(ORAS_EMPTY_CONFIG).hexdigest(), None
    )
    await client.push_blob(reference, data, "sha256:" + sha256, None)
    manifest = oras_manifest("sha256:" + sha256, len(data), image_spec)
    assert ("artifactType" in json.loads(manifest)) == (image_spec == "v1.1")
    digest = await client.push_manifest(reference, manifest, None)

    pinned = dataclasses.replace(reference, digest=digest)
    puller.declare(Declaration("oras", PLATFORM, "sim-accel", sha256, len(data), oci=pinned))
    entry = await puller.ensure("oras")
    assert (entry.sha256, entry.size) == (sha256, len(data))
    assert catalog.read_image(catalog.resolve("oras")) == data
