"""The extender's certificates as ``fpga-agent certs`` makes them: one CA, a server and a client certificate,
each for its own use, checked with the cryptography package's own certificate verifier."""

from __future__ import annotations

import datetime
import ipaddress

import pytest
from cryptography import x509
from cryptography.x509 import DNSName, IPAddress
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from agent.cluster.certs import CLOCK_SKEW, Issued, issue, service_names
from agent.errors import ConfigError

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
SERVICE = service_names("fpga-slot-extender", "fpga-slot")


@pytest.fixture(scope="module")
def issued() -> Issued:
    return issue(SERVICE, client_name="fpga-scheduler", days=30, now=NOW)


def load(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def verifier_store(issued: Issued) -> PolicyBuilder:
    return PolicyBuilder().store(Store([load(issued.ca_cert)])).time(NOW)


def test_the_service_is_named_as_the_cluster_resolves_it() -> None:
    assert SERVICE == [
        "fpga-slot-extender",
        "fpga-slot-extender.fpga-slot",
        "fpga-slot-extender.fpga-slot.svc",
        "fpga-slot-extender.fpga-slot.svc.cluster.local",
    ]


@pytest.mark.parametrize("name", SERVICE)
def test_the_server_certificate_verifies_for_every_service_name(issued: Issued, name: str) -> None:
    verifier = verifier_store(issued).build_server_verifier(DNSName(name))
    chain = verifier.verify(load(issued.server_cert), [])
    assert chain[-1] == load(issued.ca_cert)


def test_the_server_certificate_is_no_good_for_another_name(issued: Issued) -> None:
    verifier = verifier_store(issued).build_server_verifier(DNSName("other.fpga-slot.svc"))
    with pytest.raises(VerificationError):
        verifier.verify(load(issued.server_cert), [])


def test_the_client_certificate_verifies_as_a_client(issued: Issued) -> None:
    verifier = verifier_store(issued).build_client_verifier()
    verified = verifier.verify(load(issued.client_cert), [])
    assert verified.chain[-1] == load(issued.ca_cert)


@pytest.mark.parametrize(
    ("cert", "usage", "other"),
    [
        pytest.param("server_cert", ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH, id="server"),
        pytest.param("client_cert", ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH, id="client"),
    ],
)
def test_each_certificate_is_for_its_own_use_only(
    issued: Issued, cert: str, usage: x509.ObjectIdentifier, other: x509.ObjectIdentifier
) -> None:
    certificate = load(getattr(issued, cert))
    usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [usage]
    assert other not in usages
    constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert not constraints.ca


def test_the_server_certificate_cannot_stand_in_for_the_client(issued: Issued) -> None:
    verifier = verifier_store(issued).build_client_verifier()
    with pytest.raises(VerificationError):
        verifier.verify(load(issued.server_cert), [])


def test_the_ca_signs_certificates_and_nothing_below_them(issued: Issued) -> None:
    ca = load(issued.ca_cert)
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca
    assert constraints.path_length == 0
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign


def test_validity_starts_before_now_and_lasts_the_days_asked(issued: Issued) -> None:
    for pem in (issued.ca_cert, issued.server_cert, issued.client_cert):
        certificate = load(pem)
        assert certificate.not_valid_before_utc == NOW - CLOCK_SKEW
        assert certificate.not_valid_after_utc == NOW + datetime.timedelta(days=30)


def test_every_install_gets_its_own_ca(issued: Issued) -> None:
    other = issue(SERVICE, client_name="fpga-scheduler", days=30, now=NOW)
    verifier = verifier_store(issued).build_client_verifier()
    with pytest.raises(VerificationError):
        verifier.verify(load(other.client_cert), [])


def test_ip_addresses_become_ip_names() -> None:
    made = issue(["127.0.0.1", "extender.example"], client_name="c", days=1, now=NOW)
    names = load(made.server_cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert names.get_values_for_type(DNSName) == ["extender.example"]


def test_keys_are_unencrypted_pkcs8_and_never_printed(issued: Issued) -> None:
    assert issued.server_key.startswith(b"-----BEGIN PRIVATE KEY-----")
    assert issued.client_key.startswith(b"-----BEGIN PRIVATE KEY-----")
    assert "PRIVATE" not in repr(issued)
    assert issued.server_key.decode() not in repr(issued)


@pytest.mark.parametrize(
    ("names", "days", "message"),
    [
        pytest.param(["Bad_Name"], 1, r"^--server-name: 'Bad_Name' is neither an IP address nor", id="bad-name"),
        pytest.param(["a" * 254], 1, r"^--server-name: 'aaaa", id="too-long"),
        pytest.param([], 1, r"^--server-name: the server certificate needs at least one name", id="no-name"),
        pytest.param(SERVICE, 0, r"^--days: must be between 1 and 36500, got 0", id="zero-days"),
        pytest.param(SERVICE, 40000, r"^--days: must be between 1 and 36500, got 40000", id="too-many-days"),
        pytest.param(SERVICE, 1, r"^--client-name: must be a lower-case DNS name .*, got 'Sched uler'", id="client"),
    ],
)
def test_bad_requests_name_the_flag(names: list[str], days: int, message: str) -> None:
    client = "Sched uler" if "client-name" in message else "c"
    with pytest.raises(ConfigError, match=message):
        issue(names, client_name=client, days=days)
