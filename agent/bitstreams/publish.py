"""The publisher's side: push a bitstream file as an OCI artifact (one layer: the file), and the
FpgaBitstream that declares it, pinned by manifest digest."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

from agent.bitstreams.declaration import Credentials, Declaration, normalize_id
from agent.bitstreams.reference import Reference
from agent.bitstreams.registry import RegistryClient, artifact_manifest
from agent.errors import CatalogError
from agent.files.bitstream import copy_hashing, validate_name


def hash_file(path: Path) -> tuple[int, str]:
    """Size and sha256 of a file; CatalogError naming it when it cannot be read or is empty."""
    try:
        with path.open("rb") as stream:
            size, sha256 = copy_hashing(stream)
    except OSError as exc:
        raise CatalogError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if size == 0:
        raise CatalogError(f"{path} is empty")
    return size, sha256


async def push_bitstream(
    registry: RegistryClient,
    path: Path,
    name: str,
    platform: str,
    accelerator_id: str,
    reference: Reference,
    credentials: Credentials | None = None,
) -> Declaration:
    """Push ``path`` to ``reference`` (which needs a tag); return the declaration of what was pushed."""
    if reference.tag is None or reference.digest is not None:
        raise CatalogError(f"push to a tag (registry/repository:tag), not to {reference}")
    validate_name(name)
    platform = normalize_id(platform, "platform")
    accelerator_id = normalize_id(accelerator_id, "accelerator id")
    size, sha256 = await asyncio.to_thread(hash_file, path)
    config = json.dumps({"name": name, "platform": platform, "acceleratorId": accelerator_id}).encode()
    await registry.push_blob(reference, config, "sha256:" + hashlib.sha256(config).hexdigest(), credentials)
    await registry.push_blob(reference, path, "sha256:" + sha256, credentials)
    manifest = artifact_manifest("sha256:" + sha256, size, config, path.name)
    digest = await registry.push_manifest(reference, manifest, credentials)
    pinned = Reference(reference.registry, reference.repository, reference.tag, digest)
    return Declaration(name, platform, accelerator_id, sha256, size, oci=pinned)
