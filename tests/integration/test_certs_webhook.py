"""``fpga-agent certs --webhook-configuration``: the install's CA into the admission webhook's caBundle, through
the real kubernetes client and the fake API server, as DRA mode's Job runs it."""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.cli.certs import SERVER_SECRET
from tests.fakeapi import FakeKubeApiServer, running_apiserver
from tests.integration.test_certs_cli import NAMESPACE, decoded, run_certs

NAME = "fpga-slot-bitstreams"
PATH = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{NAME}"


@pytest.fixture
def api() -> Iterator[FakeKubeApiServer]:
    with running_apiserver(namespaces=(NAMESPACE,)) as server:
        yield server


def configuration(*hooks: str) -> dict[str, object]:
    """The configuration as ``kubectl apply`` leaves it: webhooks without a caBundle."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": NAME},
        "webhooks": [
            {
                "name": hook,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "timeoutSeconds": 2,
                "clientConfig": {
                    "service": {"name": "fpga-slot-extender", "namespace": NAMESPACE, "path": "/validate", "port": 8443}
                },
            }
            for hook in hooks
        ],
    }


def bundles(api: FakeKubeApiServer) -> list[bytes | None]:
    found = []
    for hook in api.get_validating_webhook_configuration(NAME)["webhooks"]:
        bundle = hook["clientConfig"].get("caBundle")
        found.append(None if bundle is None else base64.b64decode(bundle))
    return found


def test_the_ca_of_the_extenders_secret_goes_into_every_webhook_once(api: FakeKubeApiServer, tmp_path: Path) -> None:
    api.put_validating_webhook_configuration(configuration("claims.fpga.example.com", "pods.fpga.example.com"))
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    code, err = run_certs(tmp_path, "--kubeconfig", str(kubeconfig), "--webhook-configuration", NAME)
    assert code == 0, err
    assert (
        f"ValidatingWebhookConfiguration {NAME}: caBundle set to the CA of Secret {SERVER_SECRET} (2 webhooks)" in err
    )
    server = api.secret(NAMESPACE, SERVER_SECRET)
    assert server is not None
    ca = decoded(server)["ca.crt"]
    assert bundles(api) == [ca, ca]
    hooks = api.get_validating_webhook_configuration(NAME)["webhooks"]
    assert [h["clientConfig"]["service"]["name"] for h in hooks] == ["fpga-slot-extender"] * 2  # nothing else changed
    assert len(api.requests("PATCH", PATH)) == 1

    # Every later run (the Job on each `kubectl apply`) finds it done: no write.
    code, err = run_certs(tmp_path, "--kubeconfig", str(kubeconfig), "--webhook-configuration", NAME)
    assert code == 0, err
    assert f"ValidatingWebhookConfiguration {NAME} trusts the CA of Secret {SERVER_SECRET} already" in err
    assert len(api.requests("PATCH", PATH)) == 1


def test_a_webhook_added_later_gets_the_bundle_and_the_others_stay(api: FakeKubeApiServer, tmp_path: Path) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    api.put_validating_webhook_configuration(configuration("claims.fpga.example.com"))
    assert run_certs(tmp_path, "--kubeconfig", str(kubeconfig), "--webhook-configuration", NAME)[0] == 0
    (ca,) = bundles(api)
    updated = configuration("claims.fpga.example.com", "pods.fpga.example.com")
    hooks = copy.deepcopy(api.get_validating_webhook_configuration(NAME)["webhooks"])
    updated["webhooks"] = [*hooks, updated["webhooks"][1]]  # type: ignore[index]
    api.put_validating_webhook_configuration(updated)
    code, err = run_certs(tmp_path, "--kubeconfig", str(kubeconfig), "--webhook-configuration", NAME)
    assert code == 0, err
    assert "(1 webhooks)" in err
    assert bundles(api) == [ca, ca]


def test_a_missing_configuration_fails_the_run_so_that_the_job_tries_again(
    api: FakeKubeApiServer, tmp_path: Path
) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    code, err = run_certs(tmp_path, "--kubeconfig", str(kubeconfig), "--webhook-configuration", NAME)
    assert code == 1
    assert err.strip().endswith(
        f"fpga-agent certs: ValidatingWebhookConfiguration {NAME} does not exist (yet): apply the manifests that "
        "declare it first"
    )
    assert api.secret(NAMESPACE, SERVER_SECRET) is not None  # the certificates are made all the same


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--webhook-configuration", "Bad Name"], "--webhook-configuration: must be a lower-case DNS name",
                     id="bad-name"),
        pytest.param(["--webhook-configuration", NAME, "--out-dir", "out"],
                     "--webhook-configuration: the caBundle is set from the Secrets, not with --out-dir", id="out-dir"),
    ],
)  # fmt: skip
def test_bad_webhook_flags_are_refused_before_any_request(
    api: FakeKubeApiServer, tmp_path: Path, args: list[str], message: str
) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    code, err = run_certs(tmp_path, "--kubeconfig", str(kubeconfig), *args)
    assert code == 1
    assert message in err
    assert api.requests() == []
