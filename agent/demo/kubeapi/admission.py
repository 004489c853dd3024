"""AdmissionReview requests as kube-apiserver v1.36 sends them to a validating webhook (for tests and benches of
the extender's admission webhook, which the fake API server does not call itself)."""

from __future__ import annotations

from agent.demo.kubeapi.objects import JSON

DEFAULT_REVIEW_UID = "b8e5a3c6-0b1d-4d43-9a5e-1d2f7a8c9e01"


def claim_template_review(bitstream: str, uid: str = DEFAULT_REVIEW_UID) -> JSON:
    """The review of ``kubectl apply`` of a ResourceClaimTemplate ``fpga`` (namespace ``default``) whose one
    request is configured for the driver with ``bitstream``."""
    config = [{"requests": ["fpga"], "opaque": {"driver": "fpga.example.com", "parameters": {"bitstream": bitstream}}}]
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "fpga", "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "fpga", "exactly": {"deviceClassName": "fpga-slot", "count": 1}}],
                    "config": config,
                }
            }
        },
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "resource.k8s.io", "version": "v1", "kind": "ResourceClaimTemplate"},
            "resource": {"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaimtemplates"},
            "requestKind": {"group": "resource.k8s.io", "version": "v1", "kind": "ResourceClaimTemplate"},
            "name": "fpga",
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": template,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "fieldManager": "kubectl"},
        },
    }
