"""Pull credentials from a Secret's data: docker config, basic auth, token; missing ones named, never shown."""

from __future__ import annotations

import base64
import json

import pytest

from agent.bitstreams.declaration import Credentials
from agent.bitstreams.secret import BASIC_AUTH, DOCKER_CONFIG_JSON, credentials_from_secret
from agent.errors import CatalogError

HOST = "registry.example.com:5000"


def docker_config(entries: dict[str, object]) -> dict[str, bytes]:
    return {".dockerconfigjson": json.dumps({"auths": entries}).encode()}


@pytest.mark.parametrize(
    ("secret_type", "data", "expected"),
    [
        pytest.param(
            DOCKER_CONFIG_JSON,
            docker_config({HOST: {"username": "u", "password": "p"}}),
            Credentials("u", "p"),
            id="docker-username-password",
        ),
        pytest.param(
            DOCKER_CONFIG_JSON,
            docker_config({f"https://{HOST}/v1/": {"auth": base64.b64encode(b"u:p:q").decode()}}),
            Credentials("u", "p:q"),
            id="docker-auth-url-key",
        ),
        pytest.param(
            DOCKER_CONFIG_JSON,
            docker_config({"other.io": {"auth": "x"}, HOST: {"registrytoken": "t"}}),
            Credentials(token="t"),
            id="docker-registry-token",
        ),
        pytest.param(BASIC_AUTH, {"username": b"u", "password": b"p"}, Credentials("u", "p"), id="basic-auth"),
        pytest.param("Opaque", {"token": b"t"}, Credentials(token="t"), id="opaque-token"),
        pytest.param("Opaque", {"username": b"u", "password": b""}, Credentials("u", ""), id="opaque-empty-password"),
    ],
)
def test_credentials_are_read(secret_type: str, data: dict[str, bytes], expected: Credentials) -> None:
    assert credentials_from_secret("creds", secret_type, data, HOST) == expected


@pytest.mark.parametrize(
    ("secret_type", "data", "message"),
    [
        pytest.param(DOCKER_CONFIG_JSON, docker_config({"other.io": {"auth": "x"}}), "no entry for", id="other-host"),
        pytest.param(DOCKER_CONFIG_JSON, {".dockerconfigjson": b"{"}, "not JSON", id="not-json"),
        pytest.param(DOCKER_CONFIG_JSON, {}, "no .dockerconfigjson key", id="no-key"),
        pytest.param(DOCKER_CONFIG_JSON, docker_config({HOST: {"auth": "!!"}}), "not base64", id="bad-auth"),
        pytest.param(DOCKER_CONFIG_JSON, docker_config({HOST: {}}), "has no username and password", id="empty"),
        pytest.param(BASIC_AUTH, {"token": b"s3cret"}, "has no username and password or token", id="token-in-basic"),
        pytest.param("Opaque", {"username": b"u"}, "has no username and password or token", id="no-password"),
    ],
)
def test_unusable_secrets_are_named_without_their_contents(
    secret_type: str, data: dict[str, bytes], message: str
) -> None:
    with pytest.raises(CatalogError, match=message) as refused:
        credentials_from_secret("creds", secret_type, data, HOST)
    assert "'creds'" in str(refused.value)
    assert "s3cret" not in str(refused.value)
