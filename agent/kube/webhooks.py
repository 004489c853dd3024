"""The CA the API server trusts when it calls the extender's admission webhook (``caBundle``): left out of the
manifest, filled in by one JSON patch of the webhooks whose bundle differs, each guarded by a ``test`` of its name."""

from __future__ import annotations

import base64
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient

from agent.errors import KubeError
from agent.kube.client import REQUEST_TIMEOUT_S, api_status, describe_api_error


def fill_ca_bundle(api_client: ApiClient, name: str, ca_pem: bytes) -> int:
    """Set the caBundle of every webhook of the ValidatingWebhookConfiguration ``name``: how many were set (0: all
    held ``ca_pem`` already); KubeError naming the configuration when it is missing or cannot be read or patched."""
    who = f"ValidatingWebhookConfiguration {name}"
    admission = client.AdmissionregistrationV1Api(api_client)
    try:
        raw: Any = admission.read_validating_webhook_configuration(name, _request_timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:
        if api_status(exc) == 404:
            raise KubeError(f"{who} does not exist (yet): apply the manifests that declare it first") from exc
        raise KubeError(f"{who} cannot be read: {describe_api_error(exc)[1]}") from exc
    bundle = base64.b64encode(ca_pem).decode("ascii")
    operations: list[dict[str, object]] = []
    for index, webhook in enumerate(raw.webhooks or []):
        if webhook.client_config is not None and webhook.client_config.ca_bundle == bundle:
            continue
        operations.append({"op": "test", "path": f"/webhooks/{index}/name", "value": webhook.name})
        operations.append({"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": bundle})
    if not operations:
        return 0
    try:
        admission.patch_validating_webhook_configuration(name, operations, _request_timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:
        raise KubeError(f"{who}: caBundle cannot be set: {describe_api_error(exc)[1]}") from exc
    return len(operations) // 2
