"""An OCI distribution client for bitstream artifacts: pull one layer, push one artifact.

Authentication follows the registry's challenge (Basic, or a Bearer token); HTTPS unless the registry
is in ``plain_http``. Layout and rules: docs/bitstream-artifacts.md."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from yarl import URL

from agent.bitstreams.declaration import Credentials, redacted_url
from agent.bitstreams.http import (
    basic_authorization,
    check_status,
    open_following,
    read_small_body,
    stream_chunks,
    transport_errors,
)
from agent.bitstreams.reference import Reference
from agent.errors import ArtifactFormatError, SourceAuthError, SourceUnreachable, shown

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
#: The artifact type (and config media type) ``catalog push`` gives a bitstream artifact.
ARTIFACT_TYPE = "application/vnd.example.fpga-bitstream.v1+json"
#: The media type of the one layer: the bitstream file itself.
LAYER_MEDIA_TYPE = "application/vnd.example.fpga-bitstream.layer.v1"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')
_PRINTABLE = re.compile(r"[!-~]+")


@dataclass(frozen=True, slots=True)
class Layer:
    """The bitstream layer of an artifact: its digest (sha256 of the file) and size."""

    digest: str
    size: int

    @property
    def sha256(self) -> str:
        return self.digest.removeprefix("sha256:")


class RegistryClient:
    """Pull and push bitstream artifacts; one instance per agent, sharing one aiohttp session."""

    def __init__(self, session: aiohttp.ClientSession, plain_http: Collection[str] = ()) -> None:
        self.session = session
        self.plain_http = frozenset(plain_http)
        # (registry, scope, credentials) -> the Authorization header accepted or issued for them
        self._authorizations: dict[tuple[str, str, Credentials | None], str] = {}

    # ------------------------------------------------------------------ pulling
    async def fetch_layer(self, reference: Reference, credentials: Credentials | None) -> Layer:
        """The one bitstream layer of the artifact ``reference`` names."""
        what = f"OCI artifact {reference}"
        url = self._url(reference, f"manifests/{reference.manifest}")
        headers = {"Accept": OCI_MANIFEST}
        async with self._request("GET", url, reference, credentials, "pull", what, headers=headers) as response:
            body = await read_small_body(response, what)
        if reference.digest and "sha256:" + hashlib.sha256(body).hexdigest() != reference.digest:
            raise ArtifactFormatError(f"{what}: the registry's manifest does not match the reference's digest")
        return parse_manifest(body, what)

    @asynccontextmanager
    async def open_blob(
        self, reference: Reference, digest: str, credentials: Credentials | None
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """The blob's bytes as they arrive, chunk by chunk."""
        what = f"OCI artifact {reference}: blob {digest}"
        url = self._url(reference, f"blobs/{digest}")
        async with self._request("GET", url, reference, credentials, "pull", what) as response:
            yield stream_chunks(response, what)

    # ------------------------------------------------------------------ pushing
    async def push_blob(
        self, reference: Reference, data: bytes | Path, digest: str, credentials: Credentials | None
    ) -> None:
        """Upload a blob unless the repository has it already (monolithic upload: POST, then PUT)."""
        what = f"pushing {digest} to {reference.registry}/{reference.repository}"
        head = self._url(reference, f"blobs/{digest}")
        async with self._request("HEAD", head, reference, credentials, "pull,push", what, ok_missing=True) as found:
            if found.status == 200:
                return
        start = self._url(reference, "blobs/uploads/")
        async with self._request("POST", start, reference, credentials, "pull,push", what) as started:
            location = started.headers.get("Location")
        if not location:
            raise SourceUnreachable(f"{what}: the registry gave no upload Location")
        upload = start.join(URL(location)).update_query({"digest": digest})
        headers = {"Content-Type": "application/octet-stream"}
        async with self._request("PUT", upload, reference, credentials, "pull,push", what, data, headers):
            pass

    async def push_manifest(self, reference: Reference, manifest: bytes, credentials: Credentials | None) -> str:
        """Store ``manifest`` under the reference's tag (or digest); return its digest."""
        what = f"pushing the manifest of {reference}"
        url = self._url(reference, f"manifests/{reference.manifest}")
        headers = {"Content-Type": OCI_MANIFEST}
        async with self._request("PUT", url, reference, credentials, "pull,push", what, manifest, headers):
            pass
        return "sha256:" + hashlib.sha256(manifest).hexdigest()

    # ------------------------------------------------------------------ requests
    def _url(self, reference: Reference, path: str) -> URL:
        scheme = "http" if reference.registry in self.plain_http else "https"
        return URL(f"{scheme}://{reference.registry}/v2/{reference.repository}/{path}", encoded=True)

    @asynccontextmanager
    async def _request(
        self,
        method: str,
        url: URL,
        reference: Reference,
        credentials: Credentials | None,
        actions: str,
        what: str,
        data: bytes | Path | None = None,
        headers: dict[str, str] | None = None,
        ok_missing: bool = False,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """One request, answering the registry's auth challenge once; yields a 2xx response."""
        scope = f"repository:{reference.repository}:{actions}"
        key = (reference.registry, scope, credentials)
        async with transport_errors(what):
            for attempt in range(2):
                sent = dict(headers or {})
                if key in self._authorizations:
                    sent["Authorization"] = self._authorizations[key]
                body = data.open("rb") if isinstance(data, Path) else data
                try:
                    async with open_following(self.session, method, url, what, sent, body) as response:
                        if response.status == 401 and attempt == 0:
                            challenge = response.headers.get("WWW-Authenticate", "")
                            self._authorizations[key] = await self._answer(
                                challenge, reference.registry, scope, credentials, what
                            )
                            continue
                        if not (ok_missing and response.status == 404):
                            await check_status(response, what)
                        yield response
                        return
                finally:
                    if body is not None and not isinstance(body, bytes):
                        body.close()

    async def _answer(
        self, challenge: str, registry: str, scope: str, credentials: Credentials | None, what: str
    ) -> str:
        """The Authorization header that answers a ``WWW-Authenticate`` challenge."""
        kind, _, rest = challenge.partition(" ")
        kind = kind.lower()
        if credentials is None:
            raise SourceAuthError(
                f"{what}: the registry asks for credentials ({kind or 'no challenge'}) and none are set"
            )
        if credentials.token and kind == "bearer" and not credentials.username:
            return f"Bearer {credentials.token}"
        if kind == "basic":
            if credentials.username is None:
                raise SourceAuthError(f"{what}: the registry asks for a username and password; the Secret has none")
            return basic_authorization(credentials)
        if kind != "bearer":
            raise SourceAuthError(f"{what}: unsupported authentication challenge {shown(challenge)}")
        params = dict(_CHALLENGE_PARAM.findall(rest))
        realm = params.get("realm")
        if not realm or not realm.startswith(("https://", "http://")) or not _PRINTABLE.fullmatch(realm):
            raise SourceAuthError(f"{what}: the bearer challenge has no usable realm: {shown(challenge)}")
        if redacted_url(realm) != realm:
            raise SourceAuthError(f"{what}: the token service {shown(redacted_url(realm))} carries userinfo; refused")
        if not realm.startswith("https://") and registry not in self.plain_http:
            raise SourceAuthError(
                f"{what}: the registry sends the credentials to the token service {shown(redacted_url(realm))} "
                "over plain HTTP; refused (only a registry listed as plain HTTP may use a plain-HTTP token service)"
            )
        query = {"scope": params.get("scope", scope)}
        if "service" in params:
            query["service"] = params["service"]
        token_headers = {}
        if credentials.username is not None:
            token_headers["Authorization"] = basic_authorization(credentials)
        service = redacted_url(realm)
        token_what = f"{what}: token from {service}"
        async with open_following(self.session, "GET", URL(realm).update_query(query), token_what, token_headers) as r:
            await check_status(r, token_what)
            body = await read_small_body(r, token_what)
        try:
            answer: Any = json.loads(body or b"null")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SourceAuthError(f"{what}: the token service {service} did not answer JSON: {exc}") from None
        token = answer.get("token") or answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token:
            raise SourceAuthError(f"{what}: the token service {service} gave no token")
        return f"Bearer {token}"


def parse_manifest(body: bytes, what: str) -> Layer:
    """The one layer of an OCI image manifest; ArtifactFormatError naming what is wrong."""
    try:
        manifest: Any = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactFormatError(f"{what}: the manifest is not JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("schemaVersion") != 2:
        raise ArtifactFormatError(f"{what}: not an OCI image manifest (schemaVersion 2)")
    media_type = manifest.get("mediaType", OCI_MANIFEST)
    if media_type != OCI_MANIFEST:
        raise ArtifactFormatError(f"{what}: manifest media type {shown(media_type)}, expected {OCI_MANIFEST}")
    layers = manifest.get("layers")
    if not isinstance(layers, list) or len(layers) != 1 or not isinstance(layers[0], dict):
        count = len(layers) if isinstance(layers, list) else 0
        raise ArtifactFormatError(f"{what}: a bitstream artifact has exactly one layer, this one has {count}")
    layer = layers[0]
    digest, size = layer.get("digest"), layer.get("size")
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise ArtifactFormatError(f"{what}: the layer's digest {shown(digest)} is not sha256:<64 hex digits>")
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise ArtifactFormatError(f"{what}: the layer's size {shown(size)} is not a positive integer")
    return Layer(digest, size)


def artifact_manifest(layer_digest: str, layer_size: int, config: bytes, title: str) -> bytes:
    """The OCI image manifest of a bitstream artifact: its metadata as config, the file as the one layer."""
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": {
            "mediaType": ARTIFACT_TYPE,
            "digest": "sha256:" + hashlib.sha256(config).hexdigest(),
            "size": len(config),
        },
        "layers": [
            {
                "mediaType": LAYER_MEDIA_TYPE,
                "digest": layer_digest,
                "size": layer_size,
                "annotations": {"org.opencontainers.image.title": title},
            }
        ],
    }
    return json.dumps(manifest, separators=(",", ":")).encode()
