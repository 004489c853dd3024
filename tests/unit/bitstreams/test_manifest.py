"""Bitstream artifact manifests: the one layer found, anything else refused naming the problem."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.bitstreams.registry import LAYER_MEDIA_TYPE, Layer, artifact_manifest, parse_manifest
from agent.errors import ArtifactFormatError

DIGEST = "sha256:" + "ab" * 32


def test_the_manifest_push_writes_reads_back() -> None:
    manifest = artifact_manifest(DIGEST, 42, b"{}", "nlb.gbs")
    assert parse_manifest(manifest, "t") == Layer(DIGEST, 42)
    assert json.loads(manifest)["layers"][0]["mediaType"] == LAYER_MEDIA_TYPE
    assert Layer(DIGEST, 42).sha256 == "ab" * 32


def with_(**changes: Any) -> bytes:
    manifest = json.loads(artifact_manifest(DIGEST, 42, b"{}", "nlb.gbs"))
    manifest.update(changes)
    return json.dumps(manifest).encode()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"{", "not JSON", id="not-json"),
        pytest.param(with_(schemaVersion=1), "schemaVersion 2", id="schema-1"),
        pytest.param(with_(mediaType="application/vnd.oci.image.index.v1+json"), "media type", id="index"),
        pytest.param(with_(layers=[]), "exactly one layer, this one has 0", id="no-layer"),
        pytest.param(with_(layers=[{"digest": DIGEST, "size": 1}] * 2), "has 2", id="two-layers"),
        pytest.param(with_(layers=[{"digest": "md5:00", "size": 1}]), "digest 'md5:00'", id="digest"),
        pytest.param(with_(layers=[{"digest": DIGEST, "size": "1"}]), "size '1'", id="size"),
    ],
)
def test_other_manifests_are_refused(body: bytes, message: str) -> None:
    with pytest.raises(ArtifactFormatError, match=message):
        parse_manifest(body, "t")
