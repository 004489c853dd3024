"""Pull Secrets read through the real kubernetes client from the fake API server, and turned into credentials."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from agent.bitstreams.declaration import Credentials
from agent.bitstreams.secret import DOCKER_CONFIG_JSON, credentials_from_secret
from agent.errors import KubeError
from agent.kube.client import build_api_client
from agent.kube.secrets import SecretReader, parse_secret
from tests.fakeapi import FakeKubeApiServer

NAMESPACE = "fpga-slot"


@pytest.fixture
def reader(apiserver: FakeKubeApiServer, tmp_path: Path) -> Iterator[SecretReader]:
    apiserver.namespaces.add(NAMESPACE)
    api_client: client.ApiClient = build_api_client(apiserver.write_kubeconfig(tmp_path / "kubeconfig"))
    try:
        yield SecretReader(api_client, NAMESPACE)
    finally:
        api_client.close()


def test_a_docker_config_secret_gives_the_registry_credentials(
    apiserver: FakeKubeApiServer, reader: SecretReader
) -> None:
    config = {"auths": {"registry.example.com": {"username": "alice", "password": "wonderland"}}}
    apiserver.put_secret(NAMESPACE, "creds", {".dockerconfigjson": json.dumps(config).encode()}, DOCKER_CONFIG_JSON)
    secret = reader.read("creds")
    assert secret is not None
    assert secret.type == DOCKER_CONFIG_JSON
    assert "wonderland" not in repr(secret)
    credentials = credentials_from_secret(secret.name, secret.type, secret.data, "registry.example.com")
    assert credentials == Credentials("alice", "wonderland")
    assert apiserver.requests("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/creds")


def test_a_missing_secret_is_none_and_a_refused_read_is_an_error(
    apiserver: FakeKubeApiServer, reader: SecretReader
) -> None:
    assert reader.read("nothing") is None
    apiserver.put_secret(NAMESPACE, "creds", {"token": b"t"})
    apiserver.fail_next("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/creds", 403, message="forbidden by RBAC")
    with pytest.raises(KubeError, match=r"Secret fpga-slot/creds cannot be read: HTTP 403 .*forbidden by RBAC"):
        reader.read("creds")
    secret = reader.read("creds")
    assert secret is not None
    assert dict(secret.data) == {"token": b"t"}


def test_a_malformed_secret_names_the_key_not_the_value() -> None:
    with pytest.raises(KubeError, match="the value of 'token' is not base64"):
        parse_secret({"data": {"token": "s3cret!"}}, "creds")
    assert parse_secret({"data": None}, "empty").type == "Opaque"
