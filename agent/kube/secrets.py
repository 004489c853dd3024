"""Secrets: the pull credentials an FpgaBitstream names, and the extender's TLS Secrets made at install."""

from __future__ import annotations

import base64
import binascii
import types
from collections.abc import Mapping
from dataclasses import dataclass

from kubernetes.client import ApiClient

from agent.errors import KubeError, shown
from agent.kube.client import REQUEST_TIMEOUT_S, api_status, describe_api_error
from agent.kube.core import CoreCalls


@dataclass(frozen=True, slots=True)
class SecretData:
    """A Secret's type and its decoded data; never printed with its values."""

    name: str
    type: str
    data: Mapping[str, bytes]

    def __repr__(self) -> str:
        return f"SecretData(name={self.name!r}, type={self.type!r}, keys={sorted(self.data)})"


class SecretReader:
    """Reads Secrets of one namespace by name (blocking; call it off the event loop)."""

    def __init__(self, api_client: ApiClient, namespace: str) -> None:
        self._calls = CoreCalls(api_client)
        self.namespace = namespace

    def read(self, name: str) -> SecretData | None:
        """The Secret, None when there is none of that name; KubeError when it cannot be read."""
        who = f"Secret {self.namespace}/{name}"
        try:
            raw = self._calls.read_namespaced_secret(name, self.namespace, _request_timeout=REQUEST_TIMEOUT_S)
        except Exception as exc:
            if api_status(exc) == 404:
                return None
            raise KubeError(f"{who} cannot be read: {describe_api_error(exc)[1]}") from exc
        return parse_secret(raw, name)


def parse_secret(raw: object, name: str) -> SecretData:
    """A Secret as JSON: its type and base64-decoded data; KubeError naming a bad key (not its value)."""
    if not isinstance(raw, Mapping):
        raise KubeError(f"Secret {name} is not an object")
    data = raw.get("data") or {}
    if not isinstance(data, Mapping):
        raise KubeError(f"Secret {name}: data is not an object")
    decoded: dict[str, bytes] = {}
    for key, value in data.items():
        try:
            decoded[str(key)] = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raise KubeError(f"Secret {name}: the value of {shown(key)} is not base64") from None
    secret_type = raw.get("type")
    return SecretData(name, str(secret_type) if secret_type else "Opaque", types.MappingProxyType(decoded))


class SecretWriter:
    """Creates Secrets of one namespace, never replacing one (blocking; call it off the event loop)."""

    def __init__(self, api_client: ApiClient, namespace: str) -> None:
        self._calls = CoreCalls(api_client)
        self.namespace = namespace

    def create(self, name: str, secret_type: str, data: Mapping[str, bytes], labels: Mapping[str, str]) -> bool:
        """Create the Secret; False (nothing changed) when one of that name exists; KubeError otherwise."""
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": self.namespace, "labels": dict(labels)},
            "type": secret_type,
            "data": {key: base64.b64encode(value).decode("ascii") for key, value in data.items()},
        }
        try:
            self._calls.create_namespaced_secret(self.namespace, body, _request_timeout=REQUEST_TIMEOUT_S)
        except Exception as exc:
            if api_status(exc) == 409:
                return False
            raise KubeError(f"Secret {self.namespace}/{name} cannot be created: {describe_api_error(exc)[1]}") from exc
        return True
