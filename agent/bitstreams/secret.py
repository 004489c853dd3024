"""Pull credentials from a Secret's decoded data: ``kubernetes.io/dockerconfigjson`` (the host's
``auths`` entry), ``kubernetes.io/basic-auth``, or any other type with ``token`` or username and password."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from agent.bitstreams.declaration import Credentials
from agent.errors import CatalogError

DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
BASIC_AUTH = "kubernetes.io/basic-auth"


def credentials_from_secret(name: str, secret_type: str, data: Mapping[str, bytes], host: str) -> Credentials:
    """The credentials Secret ``name`` holds for ``host``; CatalogError naming Secret and host, never contents."""
    try:
        if secret_type == DOCKER_CONFIG_JSON:
            return _from_docker_config(data, host)
        token = _text(data, "token")
        if token and secret_type != BASIC_AUTH:
            return Credentials(token=token)
        username, password = _text(data, "username"), _text(data, "password")
        if username is not None and password is not None:
            return Credentials(username=username, password=password)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CatalogError(f"pull Secret {name!r} ({secret_type}): {exc}") from None
    raise CatalogError(f"pull Secret {name!r} ({secret_type}) has no username and password or token for {host}")


def _text(data: Mapping[str, bytes], key: str) -> str | None:
    raw = data.get(key)
    return None if raw is None else raw.decode("utf-8")


def _from_docker_config(data: Mapping[str, bytes], host: str) -> Credentials:
    raw = data.get(".dockerconfigjson")
    if raw is None:
        raise ValueError("no .dockerconfigjson key")
    try:
        config: Any = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f".dockerconfigjson is not JSON: {exc.msg}") from None
    auths = config.get("auths") if isinstance(config, dict) else None
    if not isinstance(auths, dict):
        raise ValueError(".dockerconfigjson has no auths object")
    for key, entry in auths.items():
        if _host_of(str(key)) == host and isinstance(entry, dict):
            return _from_auth_entry(entry, host)
    raise ValueError(f".dockerconfigjson has no entry for {host}")


def _from_auth_entry(entry: dict[str, Any], host: str) -> Credentials:
    username, password = entry.get("username"), entry.get("password")
    if isinstance(username, str) and isinstance(password, str):
        return Credentials(username=username, password=password)
    auth = entry.get("auth")
    if isinstance(auth, str):
        try:
            user, sep, secret = base64.b64decode(auth, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise ValueError(f"the auth of {host} is not base64 of user:password") from None
        if sep:
            return Credentials(username=user, password=secret)
        raise ValueError(f"the auth of {host} is not base64 of user:password")
    token = entry.get("registrytoken")
    if isinstance(token, str) and token:
        return Credentials(token=token)
    raise ValueError(f"the entry of {host} has no username and password, auth or registrytoken")


def _host_of(key: str) -> str:
    """``https://r.io/v1/`` and ``r.io`` both name the host ``r.io``, as docker config keys are written."""
    return key.removeprefix("https://").removeprefix("http://").split("/", 1)[0]
