"""Certificates for the extender's mutual TLS: one CA, the extender's server and the scheduler's client certificate.

ECDSA P-256 keys; each certificate is for one use only (server or client auth). The CA's key is
discarded, so a new pair means a new CA (docs/security.md).
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agent.errors import ConfigError, shown

#: A certificate is valid from a little before it was made: nodes whose clocks run behind accept it.
CLOCK_SKEW = datetime.timedelta(hours=1)
MAX_DAYS = 36500
_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True, slots=True)
class Issued:
    """The PEM files of one install: the CA's certificate and two key pairs (the CA's key is not kept)."""

    ca_cert: bytes
    server_cert: bytes
    server_key: bytes
    client_cert: bytes
    client_key: bytes

    def __repr__(self) -> str:
        return "Issued(ca_cert, server_cert, server_key=<hidden>, client_cert, client_key=<hidden>)"


def service_names(service: str, namespace: str) -> list[str]:
    """The DNS names a Service answers to inside the cluster, shortest first."""
    base = f"{service}.{namespace}"
    return [service, base, f"{base}.svc", f"{base}.svc.cluster.local"]


def subject_names(names: Sequence[str]) -> list[x509.GeneralName]:
    """Subject alternative names: IP addresses as such, everything else a DNS name; ConfigError naming a bad one."""
    general: list[x509.GeneralName] = []
    for name in names:
        try:
            general.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            if len(name) > 253 or not _DNS_NAME.fullmatch(name):
                raise ConfigError(
                    f"--server-name: {shown(name)} is neither an IP address nor a lower-case DNS name"
                ) from None
            general.append(x509.DNSName(name))
    if not general:
        raise ConfigError("--server-name: the server certificate needs at least one name")
    return general


def check_days(days: int) -> None:
    """ConfigError unless ``days`` is a validity the certificates can have."""
    if not 1 <= days <= MAX_DAYS:
        raise ConfigError(f"--days: must be between 1 and {MAX_DAYS}, got {days}")


def check_client_name(name: str) -> None:
    """ConfigError unless ``name`` can name the client (its common name and DNS name)."""
    if len(name) > 63 or not _DNS_NAME.fullmatch(name):
        raise ConfigError(f"--client-name: must be a lower-case DNS name of at most 63 characters, got {shown(name)}")


def issue(server_names: Sequence[str], *, client_name: str, days: int, now: datetime.datetime | None = None) -> Issued:
    """A fresh CA, a server certificate for ``server_names`` and a client certificate for ``client_name``."""
    check_days(days)
    check_client_name(client_name)
    alt_names = subject_names(server_names)
    start = (now or datetime.datetime.now(datetime.UTC)) - CLOCK_SKEW
    end = start + CLOCK_SKEW + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_subject = _name("fpga-slot extender CA")
    ca_cert = (
        _builder(ca_subject, ca_subject, ca_key.public_key(), start, end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server = _leaf(ca_cert, ca_key, server_names[0], alt_names, start, end, ExtendedKeyUsageOID.SERVER_AUTH)
    client = _leaf(
        ca_cert, ca_key, client_name, [x509.DNSName(client_name)], start, end, ExtendedKeyUsageOID.CLIENT_AUTH
    )
    return Issued(_pem(ca_cert), *server, *client)


def _leaf(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    alt_names: Sequence[x509.GeneralName],
    start: datetime.datetime,
    end: datetime.datetime,
    usage: x509.ObjectIdentifier,
) -> tuple[bytes, bytes]:
    """A fresh key and its certificate for one use, signed by the CA: (certificate, key) as PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(_name(common_name), ca_cert.subject, key.public_key(), start, end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pkcs8 = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return _pem(cert), pkcs8


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, start: datetime.datetime,
    end: datetime.datetime,
) -> x509.CertificateBuilder:  # fmt: skip
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _key_usage(*, signs: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not signs,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs,
        crl_sign=signs,
        encipher_only=False,
        decipher_only=False,
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def tls_context(cert_file: str, key_file: str, client_ca_file: str | None) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2+); with ``client_ca_file``, clients must show a certificate it signed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        context.load_verify_locations(client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context
