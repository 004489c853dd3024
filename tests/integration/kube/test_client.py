"""Building the API client: kubeconfig or service account, and a clear KubeError when neither works."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agent.errors import KubeError
from agent.kube.client import (
    IN_CLUSTER,
    KubeconfigChoice,
    api_status,
    build_api_client,
    connect_api,
    describe_api_error,
    is_transient,
    resolve_kubeconfig,
)
from tests.fakeapi import FakeKubeApiServer


def test_kubeconfig_client_talks_to_the_server_with_its_token(apiserver: FakeKubeApiServer, kubeconfig: Path) -> None:
    apiserver.add_pod("p1")
    api_client = build_api_client(kubeconfig)
    try:
        pods = client.CoreV1Api(api_client).list_namespaced_pod("default")
    finally:
        api_client.close()
    assert [p.metadata.name for p in pods.items] == ["p1"]
    [request] = apiserver.requests("GET", "/api/v1/namespaces/default/pods")
    assert request.headers["authorization"] == "Bearer test-token"


def test_kubeconfig_with_a_wrong_token_is_refused_by_the_server(apiserver: FakeKubeApiServer, tmp_path: Path) -> None:
    api_client = build_api_client(apiserver.write_kubeconfig(tmp_path / "kc", token="stale"))
    try:
        with pytest.raises(ApiException) as info:
            client.CoreV1Api(api_client).list_namespaced_pod("default")
    finally:
        api_client.close()
    assert info.value.status == 401
    assert describe_api_error(info.value) == ("HTTP 401", "HTTP 401 Unauthorized: Unauthorized")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "no such file", id="missing"),
        pytest.param("", "not a usable kubeconfig", id="empty"),
        pytest.param("clusters: [\n", "not a usable kubeconfig", id="not-yaml"),
        pytest.param("just a string", "not a usable kubeconfig", id="not-a-mapping"),
        pytest.param(
            json.dumps({"apiVersion": "v1", "kind": "Config", "clusters": []}),
            "current-context",
            id="no-current-context",
        ),
        pytest.param(
            json.dumps({"apiVersion": "v1", "clusters": [], "contexts": [], "users": [], "current-context": "x"}),
            "not a usable kubeconfig",
            id="unknown-context",
        ),
    ],
)
def test_unusable_kubeconfig_is_a_clear_kube_error(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "kubeconfig" if content is None else _write(tmp_path, content)
    with pytest.raises(KubeError, match=message) as info:
        build_api_client(path)
    assert str(info.value).startswith(f"--kubeconfig {path}: ")


def test_kubeconfig_directory_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(KubeError, match="no such file"):
        build_api_client(tmp_path)


@pytest.fixture
def service_account(tmp_path: Path) -> Path:
    directory = tmp_path / "serviceaccount"
    directory.mkdir()
    (directory / "token").write_text("sa-token")
    (directory / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nnot checked here\n-----END CERTIFICATE-----\n")
    return directory


IN_CLUSTER_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def test_in_cluster_client_uses_the_service_account(service_account: Path) -> None:
    api_client = build_api_client(None, environ=IN_CLUSTER_ENV, service_account_dir=service_account)
    try:
        configuration = api_client.configuration
        assert configuration.host == "https://10.96.0.1:443"
        assert configuration.api_key["BearerToken"] == "bearer sa-token"
        assert configuration.ssl_ca_cert == str(service_account / "ca.crt")
    finally:
        api_client.close()


@pytest.mark.parametrize(
    ("environ", "remove", "message"),
    [
        pytest.param({}, None, "not running in a pod", id="no-service-env"),
        pytest.param({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, None, "not running in a pod", id="no-port"),
        pytest.param(
            {"KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": "443"}, None, "not running", id="empty-host"
        ),
        pytest.param(IN_CLUSTER_ENV, "token", "token file does not exist", id="no-token"),
        pytest.param(IN_CLUSTER_ENV, "ca.crt", "certification file does not exist", id="no-ca"),
    ],
)
def test_without_kubeconfig_or_service_account_the_error_says_what_is_missing(
    service_account: Path, environ: dict[str, str], remove: str | None, message: str
) -> None:
    if remove:
        (service_account / remove).unlink()
    with pytest.raises(KubeError, match=message) as info:
        build_api_client(None, environ=environ, service_account_dir=service_account)
    assert "--kubeconfig" in str(info.value) or str(service_account) in str(info.value)


def _api_exception(status: int, body: str | None) -> ApiException:
    exc = ApiException(status=status, reason="Reason")
    exc.body = body
    return exc


STATUS_403 = json.dumps(
    {"kind": "Status", "status": "Failure", "reason": "Forbidden", "message": "pods is forbidden", "code": 403}
)


@pytest.mark.parametrize(
    ("exc", "kind", "text", "transient", "status"),
    [
        pytest.param(
            _api_exception(403, STATUS_403),
            "HTTP 403",
            "HTTP 403 Forbidden: pods is forbidden",
            False,
            403,
            id="status",
        ),
        pytest.param(_api_exception(500, "oops"), "HTTP 500", "HTTP 500 oops", True, 500, id="plain-body"),
        pytest.param(_api_exception(429, None), "HTTP 429", "HTTP 429 Reason", True, 429, id="no-body"),
        pytest.param(
            ApiException(status=0, reason="SSLError\ncertificate verify failed"),
            "connection",
            "cannot reach the API server: SSLError\ncertificate verify failed",
            True,
            None,
            id="tls",
        ),
        pytest.param(
            ConnectionRefusedError(111, "Connection refused"),
            "connection",
            "cannot reach the API server: [Errno 111] Connection refused",
            True,
            None,
            id="refused",
        ),
        pytest.param(
            urllib3.exceptions.ProtocolError("Response ended prematurely"),
            "connection",
            "cannot reach the API server: Response ended prematurely",
            True,
            None,
            id="cut",
        ),
        pytest.param(ValueError("bad JSON"), "ValueError", "ValueError: bad JSON", False, None, id="other"),
    ],
)
def test_describe_api_error(exc: BaseException, kind: str, text: str, transient: bool, status: int | None) -> None:
    assert describe_api_error(exc) == (kind, text)
    assert is_transient(exc) is transient
    assert api_status(exc) == status


# ------------------------------------------------------------------ which kubeconfig (as kubectl finds it)
def test_resolve_kubeconfig_takes_the_flag_first(tmp_path: Path) -> None:
    given = tmp_path / "given"
    choice = resolve_kubeconfig(given, {"KUBECONFIG": str(tmp_path / "other")}, tmp_path)
    assert choice == KubeconfigChoice(given, "--kubeconfig")  # not checked here: building the client says so


def test_resolve_kubeconfig_takes_the_first_existing_file_of_the_kubeconfig_path(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    second.write_text("{}")
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("{}")
    environ = {"KUBECONFIG": f"{first}{os.pathsep}{second}"}
    assert resolve_kubeconfig(None, environ, tmp_path) == KubeconfigChoice(second, "$KUBECONFIG")
    first.write_text("{}")
    assert resolve_kubeconfig(None, environ, tmp_path) == KubeconfigChoice(first, "$KUBECONFIG")


def test_resolve_kubeconfig_naming_only_missing_files_is_an_error_not_a_fallback(tmp_path: Path) -> None:
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("{}")  # kubectl does not fall back to it either
    missing = f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}"
    with pytest.raises(KubeError) as info:
        resolve_kubeconfig(None, {"KUBECONFIG": missing}, tmp_path)
    assert str(info.value) == f"$KUBECONFIG names {missing}: no such file"


def test_resolve_kubeconfig_then_home_then_in_cluster(tmp_path: Path) -> None:
    assert resolve_kubeconfig(None, {"KUBECONFIG": ""}, tmp_path) == KubeconfigChoice(None, IN_CLUSTER)
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("{}")
    assert resolve_kubeconfig(None, {}, tmp_path) == KubeconfigChoice(tmp_path / ".kube" / "config", "~/.kube/config")


def test_connect_api_names_where_a_bad_kubeconfig_came_from(tmp_path: Path) -> None:
    bad = _write(tmp_path, "just: [text")
    with pytest.raises(KubeError) as info:
        connect_api(None, {"KUBECONFIG": str(bad)}, tmp_path)
    assert str(info.value).startswith(f"kubeconfig {bad} (from $KUBECONFIG): not a usable kubeconfig")


def test_connect_api_without_any_kubeconfig_outside_a_pod_says_what_was_tried(tmp_path: Path) -> None:
    with pytest.raises(KubeError) as info:
        connect_api(None, {}, tmp_path)
    assert "none given (--kubeconfig), $KUBECONFIG unset, no ~/.kube/config" in str(info.value)
