"""``fpga-agent certs`` as the install's Job runs it: a real process making the extender's TLS Secrets through
the fake API server, once; and with ``--out-dir``, the same files on disk."""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from agent.cli.certs import CLIENT_SECRET, SERVER_SECRET, SecretStore, make_certificates
from agent.cluster.certs import Issued, issue
from agent.errors import FpgaSlotError
from agent.kube.client import build_api_client
from agent.kube.secrets import SecretReader, SecretWriter
from tests.fakeapi import FakeKubeApiServer, running_apiserver
from tests.fakes import run_fpga_agent

NAMESPACE = "fpga-slot"
SECRETS_PATH = f"/api/v1/namespaces/{NAMESPACE}/secrets"
KEYS = {"tls.crt", "tls.key", "ca.crt"}


@pytest.fixture
def api() -> Iterator[FakeKubeApiServer]:
    with running_apiserver(namespaces=(NAMESPACE, "default")) as server:
        yield server


def certs_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("FPGA_AGENT_")}
    for key in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE"):
        env.pop(key, None)
    return env


def run_certs(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Exit code and what the command said (its own lines; the API client's log line left out)."""
    done = run_fpga_agent(tmp_path, env or certs_env(), "certs", *args)
    assert done.stdout == ""
    said = [line for line in done.stderr.splitlines(keepends=True) if "agent.kube.client: API server" not in line]
    return done.returncode, "".join(said)


def decoded(secret: dict[str, object]) -> dict[str, bytes]:
    data = secret["data"]
    assert isinstance(data, dict)
    return {key: base64.b64decode(value) for key, value in data.items()}


def test_makes_both_secrets_from_one_ca_in_cert_managers_layout(api: FakeKubeApiServer, tmp_path: Path) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    code, err = run_certs(tmp_path, "--kubeconfig", str(kubeconfig))
    assert code == 0, err
    assert f"Secret {NAMESPACE}/{SERVER_SECRET} and Secret {NAMESPACE}/{CLIENT_SECRET}" in err
    assert "made a CA and its server and client certificates, valid until " in err
    server, client = (api.secret(NAMESPACE, name) for name in (SERVER_SECRET, CLIENT_SECRET))
    assert server is not None
    assert client is not None
    for secret in (server, client):
        assert secret["type"] == "kubernetes.io/tls"
        assert set(decoded(secret)) == KEYS
        assert secret["metadata"]["labels"]["app.kubernetes.io/name"] == "fpga-slot"
    assert decoded(server)["ca.crt"] == decoded(client)["ca.crt"]
    certificate = x509.load_pem_x509_certificate(decoded(server)["tls.crt"])
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "fpga-slot-extender.fpga-slot.svc" in names.get_values_for_type(x509.DNSName)
    assert len(api.requests("POST", SECRETS_PATH)) == 2


def test_a_second_run_leaves_the_secrets_as_they_are(api: FakeKubeApiServer, tmp_path: Path) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    assert run_certs(tmp_path, "--kubeconfig", str(kubeconfig))[0] == 0
    before = [api.secret(NAMESPACE, name) for name in (SERVER_SECRET, CLIENT_SECRET)]
    code, err = run_certs(tmp_path, "--kubeconfig", str(kubeconfig))
    assert code == 0, err
    assert err.strip().endswith("exist: left as they are")
    assert [api.secret(NAMESPACE, name) for name in (SERVER_SECRET, CLIENT_SECRET)] == before
    assert len(api.requests("POST", SECRETS_PATH)) == 2  # only the first run's


@pytest.mark.parametrize("existing", [SERVER_SECRET, CLIENT_SECRET])
def test_one_secret_alone_is_refused_and_nothing_is_made(api: FakeKubeApiServer, tmp_path: Path, existing: str) -> None:
    api.put_secret(NAMESPACE, existing, {"tls.crt": b"x", "tls.key": b"y", "ca.crt": b"z"}, "kubernetes.io/tls")
    missing = CLIENT_SECRET if existing == SERVER_SECRET else SERVER_SECRET
    code, err = run_certs(tmp_path, "--kubeconfig", str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    assert code == 1
    assert err == (
        f"fpga-agent certs: Secret {NAMESPACE}/{existing} exists but Secret {NAMESPACE}/{missing} does not, and "
        f"they must come from one CA: delete Secret {NAMESPACE}/{existing} to make a new pair (nothing changed)\n"
    )
    assert api.requests("POST", SECRETS_PATH) == []
    assert api.secret(NAMESPACE, missing) is None


def test_a_refused_create_is_one_line_naming_the_secret(api: FakeKubeApiServer, tmp_path: Path) -> None:
    api.fail_next("POST", SECRETS_PATH, 403, message="secrets is forbidden", reason="Forbidden")
    code, err = run_certs(tmp_path, "--kubeconfig", str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    assert code == 1
    assert err.startswith(f"fpga-agent certs: Secret {NAMESPACE}/{SERVER_SECRET} cannot be created: ")
    assert "forbidden" in err
    assert len(err.splitlines()) == 1


def test_the_namespace_comes_from_the_pod(api: FakeKubeApiServer, tmp_path: Path) -> None:
    """The Job hands its namespace down as POD_NAMESPACE: Secrets and Service names follow it."""
    env = {**certs_env(), "POD_NAMESPACE": "default"}
    code, err = run_certs(tmp_path, "--kubeconfig", str(api.write_kubeconfig(tmp_path / "kubeconfig")), env=env)
    assert code == 0, err
    secret = api.secret("default", SERVER_SECRET)
    assert secret is not None
    certificate = x509.load_pem_x509_certificate(decoded(secret)["tls.crt"])
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "fpga-slot-extender.default.svc" in names.get_values_for_type(x509.DNSName)
    assert api.secret(NAMESPACE, SERVER_SECRET) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--server-secret", "Not_A_Name"], "--server-secret: must be a lower-case DNS name", id="secret"),
        pytest.param(["--server-name", "bad name"], "--server-name: 'bad name' is neither", id="server-name"),
        pytest.param(["--days", "0"], "--days: must be between 1 and 36500, got 0", id="days"),
        pytest.param(["--client-name", "A B"], "--client-name: must be a lower-case DNS name", id="client-name"),
    ],
)
def test_bad_flags_are_refused_before_any_request(
    api: FakeKubeApiServer, tmp_path: Path, args: list[str], message: str
) -> None:
    code, err = run_certs(tmp_path, "--kubeconfig", str(api.write_kubeconfig(tmp_path / "kubeconfig")), *args)
    assert code == 1
    assert message in err
    assert len(err.splitlines()) == 1
    assert api.requests(path=SECRETS_PATH) == []
    assert not [r for r in api.requests() if "/secrets" in r.path]


def test_out_dir_writes_the_same_sets_with_private_keys_private(tmp_path: Path) -> None:
    out = tmp_path / "tls"
    code, err = run_certs(tmp_path, "--out-dir", str(out), "--server-name", "127.0.0.1")
    assert code == 0, err
    for part in ("server", "client"):
        assert {path.name for path in (out / part).iterdir()} == KEYS
        assert stat.S_IMODE((out / part / "tls.key").stat().st_mode) == 0o600
    assert (out / "server" / "ca.crt").read_bytes() == (out / "client" / "ca.crt").read_bytes()
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no staging left behind
    before = (out / "server" / "tls.key").read_bytes()
    code, err = run_certs(tmp_path, "--out-dir", str(out))
    assert code == 0, err
    assert "left as they are" in err
    assert (out / "server" / "tls.key").read_bytes() == before


def test_a_secret_created_meanwhile_is_reported_not_overwritten(api: FakeKubeApiServer, tmp_path: Path) -> None:
    """Another writer creates the client Secret between the check and the writes (here: while the certificates
    are made): the command says so and replaces nothing."""
    client = build_api_client(api.write_kubeconfig(tmp_path / "kubeconfig"))
    store = SecretStore(SecretReader(client, NAMESPACE), SecretWriter(client, NAMESPACE), SERVER_SECRET, CLIENT_SECRET)
    theirs = {"tls.crt": b"theirs", "tls.key": b"theirs", "ca.crt": b"theirs"}

    def make_while_another_writes() -> Issued:
        api.put_secret(NAMESPACE, CLIENT_SECRET, theirs, "kubernetes.io/tls")
        return issue(["x"], client_name="fpga-scheduler", days=1)

    try:
        with pytest.raises(FpgaSlotError, match=r"was created by someone else meanwhile.*delete both and run again"):
            make_certificates(store, make_while_another_writes, lambda _: None)
    finally:
        client.close()
    stored = api.secret(NAMESPACE, CLIENT_SECRET)
    assert stored is not None
    assert decoded(stored) == theirs
