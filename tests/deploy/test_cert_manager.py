"""overlays/cert-manager: the extender's certificates from cert-manager instead of the fpga-slot-certs Job, in the
Secrets, layout and usages the workloads and the scheduler's tlsConfig expect; and DRA mode, which keeps the extender,
with the same certificates."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from agent.cli.certs import CLIENT_NAME, CLIENT_SECRET, SERVER_SECRET, SERVICE
from agent.cluster.certs import service_names
from tests.deploy.manifests import NAMESPACE, REPO, Manifests, Obj, object_id

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with kustomize) not installed")
KUBERNETES_VERSION = kubernetes_validate.latest_version()
CERTS_OBJECTS = {("Job", "fpga-slot-certs"), ("ServiceAccount", "fpga-slot-certs"), ("Role", "fpga-slot-certs"),
                 ("RoleBinding", "fpga-slot-certs")}  # fmt: skip


def kustomize(directory: Path) -> Manifests:
    result = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return Manifests([doc for doc in yaml.safe_load_all(result.stdout) if doc is not None])


def certificates(manifests: Manifests) -> dict[str, Obj]:
    """Certificate by the Secret it makes."""
    return {cert["spec"]["secretName"]: cert for cert in manifests.of_kind("Certificate")}


def secret_volumes(manifests: Manifests, name: str) -> set[str]:
    spec = manifests.get("Deployment", name, NAMESPACE)["spec"]["template"]["spec"]
    return {volume["secret"]["secretName"] for volume in spec.get("volumes", []) if "secret" in volume}


@pytest.fixture(scope="module")
def cert_manager() -> Manifests:
    return kustomize(REPO / "overlays" / "cert-manager")


def test_the_job_and_its_rbac_give_way_to_certificates(cert_manager: Manifests) -> None:
    present = {(obj["kind"], obj["metadata"]["name"]) for obj in cert_manager.objects}
    assert not present & CERTS_OBJECTS
    assert set(certificates(cert_manager)) >= {SERVER_SECRET, CLIENT_SECRET}


def test_the_certificates_make_the_secrets_the_workloads_mount(cert_manager: Manifests) -> None:
    assert secret_volumes(cert_manager, "fpga-slot-extender") == {SERVER_SECRET}
    assert secret_volumes(cert_manager, "fpga-scheduler") == {CLIENT_SECRET}


def test_the_server_certificate_names_the_service_and_serves_only(cert_manager: Manifests) -> None:
    server = certificates(cert_manager)[SERVER_SECRET]["spec"]
    assert server["dnsNames"] == service_names(SERVICE, NAMESPACE)
    assert set(server["usages"]) == {"digital signature", "server auth"}


def test_the_client_certificate_is_the_schedulers_and_a_client_only(cert_manager: Manifests) -> None:
    client = certificates(cert_manager)[CLIENT_SECRET]["spec"]
    assert client["commonName"] == CLIENT_NAME
    assert set(client["usages"]) == {"digital signature", "client auth"}


def test_both_come_from_one_ca_of_the_namespace(cert_manager: Manifests) -> None:
    """The extender's ca.crt must be the CA of the scheduler's certificate, and the other way round: one CA
    issuer, whose CA is a self-signed CA certificate."""
    made = certificates(cert_manager)
    (issuer,) = {made[name]["spec"]["issuerRef"]["name"] for name in (SERVER_SECRET, CLIENT_SECRET)}
    ca_issuer = cert_manager.get("Issuer", issuer, NAMESPACE)["spec"]["ca"]
    ca = made[ca_issuer["secretName"]]["spec"]
    assert ca["isCA"] is True
    root = cert_manager.get("Issuer", ca["issuerRef"]["name"], NAMESPACE)
    assert root["spec"] == {"selfSigned": {}}
    for cert in cert_manager.of_kind("Certificate") + cert_manager.of_kind("Issuer"):
        assert cert["apiVersion"] == "cert-manager.io/v1"
        assert cert["metadata"]["namespace"] == NAMESPACE


def test_the_kubernetes_objects_still_validate(cert_manager: Manifests) -> None:
    for obj in cert_manager.objects:
        if obj["apiVersion"].startswith("cert-manager.io/"):
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{object_id(obj)}: {exc}") from None


@pytest.mark.parametrize("overlay", ["dra", "sim-dra"])
def test_dra_mode_keeps_the_extender_certificates(overlay: str) -> None:
    """The fpga-scheduler calls the extender in DRA mode too: the certificates' Job makes both Secrets, the
    extender mounts its server certificate and the scheduler its client certificate, where its tlsConfig reads them."""
    manifests = kustomize(REPO / "overlays" / overlay)
    present = {(obj["kind"], obj["metadata"]["name"]) for obj in manifests.objects}
    assert present >= CERTS_OBJECTS
    assert secret_volumes(manifests, "fpga-slot-extender") == {SERVER_SECRET}
    assert secret_volumes(manifests, "fpga-scheduler") == {CLIENT_SECRET}
    scheduler = manifests.get("Deployment", "fpga-scheduler", NAMESPACE)
    (container,) = scheduler["spec"]["template"]["spec"]["containers"]
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    (config_map,) = [o for o in manifests.of_kind("ConfigMap") if o["metadata"]["name"].startswith("fpga-scheduler")]
    (extender,) = yaml.safe_load(config_map["data"]["scheduler-config.yaml"])["extenders"]
    assert {Path(path).parent for path in extender["tlsConfig"].values() if path.startswith("/")} == {
        Path(mounts["extender-client-tls"])
    }
