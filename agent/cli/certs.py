"""``fpga-agent certs``: the extender's TLS certificates, made once at install time (docs/security.md).

A CA, the extender's server and the fpga-scheduler's client certificate, stored as two Secrets in
cert-manager's layout: both present are left as they are, one alone is an error that changes nothing.
``--out-dir`` writes files instead; ``--webhook-configuration`` puts the CA in that ``caBundle``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.cli.flags import add_option_argument
from agent.errors import ConfigError, FpgaSlotError, shown
from agent.files.atomic import fsync_directory
from agent.kube.client import connect_api
from agent.kube.secrets import SecretReader, SecretWriter
from agent.kube.webhooks import fill_ca_bundle

if TYPE_CHECKING:
    from agent.cluster.certs import Issued

# Names of Secrets and a Secret type, not secrets:
SERVER_SECRET = "fpga-slot-extender-tls"  # noqa: S105
CLIENT_SECRET = "fpga-scheduler-extender-client"  # noqa: S105
SERVICE = "fpga-slot-extender"
CLIENT_NAME = "fpga-scheduler"
DAYS = 3650
SECRET_TYPE = "kubernetes.io/tls"  # noqa: S105
LABELS = {"app.kubernetes.io/name": "fpga-slot", "app.kubernetes.io/component": "extender-tls"}
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def add_certs_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    certs = commands.add_parser(
        "certs",
        help="make the extender's TLS certificates (a CA, server and client) into Secrets, unless they exist",
        description="Make a CA, the extender's server certificate and the fpga-scheduler's client certificate, and "
        "store them as two Secrets (tls.crt, tls.key, ca.crt each); Secrets that exist are left as they are.",
    )
    add_option_argument(certs, "namespace")
    certs.add_argument("--service", default=SERVICE, help=f"the extender's Service, named in the server certificate "
                       f"(default {SERVICE})")  # fmt: skip
    certs.add_argument(
        "--server-name",
        action="append",
        metavar="NAME",
        help="a DNS name or IP address for the server certificate, instead of the Service's names (repeatable)",
    )
    certs.add_argument("--server-secret", default=SERVER_SECRET, help="the extender's Secret (default %(default)s)")
    certs.add_argument(
        "--client-secret", default=CLIENT_SECRET, help="the fpga-scheduler's Secret (default %(default)s)"
    )
    certs.add_argument(
        "--client-name", default=CLIENT_NAME, help="client certificate's common name (default %(default)s)"
    )
    certs.add_argument("--days", type=int, default=DAYS, help=f"validity of the certificates (default {DAYS})")
    add_option_argument(certs, "kubeconfig")
    certs.add_argument(
        "--webhook-configuration",
        metavar="NAME",
        help="then put the CA into the caBundle of this ValidatingWebhookConfiguration (the extender's admission "
        "webhook)",
    )
    certs.add_argument(
        "--out-dir", type=Path, help="write DIR/server/ and DIR/client/ (PEM files) instead of Secrets; no API access"
    )


@dataclass(frozen=True, slots=True)
class SecretStore:
    """The two Secrets of one namespace."""

    reader: SecretReader
    writer: SecretWriter
    server: str
    client: str

    def present(self) -> dict[str, bool]:
        ns = self.reader.namespace
        return {f"Secret {ns}/{name}": self.reader.read(name) is not None for name in (self.server, self.client)}

    def write(self, server: Mapping[str, bytes], client: Mapping[str, bytes]) -> None:
        ns = self.writer.namespace
        for name, data in ((self.server, server), (self.client, client)):
            if not self.writer.create(name, SECRET_TYPE, data, LABELS):
                raise FpgaSlotError(
                    f"Secret {ns}/{name} was created by someone else meanwhile, so Secrets {ns}/{self.server} and "
                    f"{ns}/{self.client} may not belong together: delete both and run again"
                )


@dataclass(frozen=True, slots=True)
class DirectoryStore:
    """``DIR/server/`` and ``DIR/client/``, each written whole (a temporary directory renamed into place)."""

    directory: Path

    def present(self) -> dict[str, bool]:
        return {str(self.directory / part): (self.directory / part).exists() for part in ("server", "client")}

    def write(self, server: Mapping[str, bytes], client: Mapping[str, bytes]) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for part, files in (("server", server), ("client", client)):
                staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.directory))
                for name, data in files.items():
                    mode = 0o600 if name.endswith(".key") else 0o644
                    fd = os.open(staging / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
                    with os.fdopen(fd, "wb") as stream:
                        stream.write(data)
                staging.chmod(0o700)
                staging.rename(self.directory / part)
            fsync_directory(self.directory)
        except OSError as exc:
            raise ConfigError(f"--out-dir {self.directory}: cannot write: {exc.strerror or exc}") from None


def make_certificates(
    store: SecretStore | DirectoryStore, make: Callable[[], Issued], say: Callable[[str], None]
) -> None:
    """Both sets made and written when neither exists; nothing done when both do; FpgaSlotError when one does."""
    present = store.present()
    if all(present.values()):
        say(f"{' and '.join(present)} exist: left as they are")
        return
    found = [where for where, there in present.items() if there]
    if found:
        missing = [where for where, there in present.items() if not there]
        raise FpgaSlotError(
            f"{found[0]} exists but {missing[0]} does not, and they must come from one CA: "
            f"delete {found[0]} to make a new pair (nothing changed)"
        )
    from cryptography import x509  # loaded by this command only, not by every fpga-agent process

    issued = make()  # the extender's and the scheduler's set, in cert-manager's layout
    store.write(
        {"tls.crt": issued.server_cert, "tls.key": issued.server_key, "ca.crt": issued.ca_cert},
        {"tls.crt": issued.client_cert, "tls.key": issued.client_key, "ca.crt": issued.ca_cert},
    )
    until = x509.load_pem_x509_certificate(issued.ca_cert).not_valid_after_utc
    say(f"made a CA and its server and client certificates, valid until {until:%Y-%m-%d}: {' and '.join(present)}")


def _say(line: str) -> None:
    print(f"fpga-agent certs: {line}", file=sys.stderr)


def trust_webhook(reader: SecretReader, server: str, api_client: Any, name: str) -> str:
    """The CA of the extender's Secret into the webhooks' caBundle; what was done, or FpgaSlotError."""
    secret = reader.read(server)
    ca = secret.data.get("ca.crt") if secret is not None else None
    if not ca:
        raise FpgaSlotError(
            f"Secret {reader.namespace}/{server} has no ca.crt: the webhook cannot be told whom to trust"
        )
    changed = fill_ca_bundle(api_client, name, ca)
    if changed:
        return f"ValidatingWebhookConfiguration {name}: caBundle set to the CA of Secret {server} ({changed} webhooks)"
    return f"ValidatingWebhookConfiguration {name} trusts the CA of Secret {server} already"


def resolve_namespace(given: str | None, env: Mapping[str, str]) -> str:
    namespace = given or env.get("FPGA_AGENT_NAMESPACE") or env.get("POD_NAMESPACE") or "fpga-slot"
    if not _DNS_LABEL.fullmatch(namespace):
        raise ConfigError(f"--namespace: must be a namespace name (lower-case letters, digits and '-'), got "
                          f"{shown(namespace)}")  # fmt: skip
    return namespace


def _check_name(flag: str, value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ConfigError(f"{flag}: must be a lower-case DNS name, got {shown(value)}")
    return value


def run_certs(args: argparse.Namespace) -> int:
    """Make the certificates unless they exist; one line naming the problem on standard error and 1 on failure."""
    from agent.cluster.certs import check_client_name, check_days, issue, service_names, subject_names

    api_client = None
    try:
        namespace = resolve_namespace(args.namespace, os.environ)
        names = args.server_name or service_names(_check_name("--service", args.service), namespace)
        subject_names(names)
        check_days(args.days)
        check_client_name(args.client_name)
        webhook = args.webhook_configuration
        if webhook is not None:
            _check_name("--webhook-configuration", webhook)
        if args.out_dir is not None:
            if webhook is not None:
                raise ConfigError("--webhook-configuration: the caBundle is set from the Secrets, not with --out-dir")
            store: SecretStore | DirectoryStore = DirectoryStore(args.out_dir)
        else:
            server = _check_name("--server-secret", args.server_secret)
            client = _check_name("--client-secret", args.client_secret)
            kubeconfig = args.kubeconfig or os.environ.get("FPGA_AGENT_KUBECONFIG")
            api_client = connect_api(Path(kubeconfig) if kubeconfig else None)
            store = SecretStore(
                SecretReader(api_client, namespace), SecretWriter(api_client, namespace), server, client
            )
        make_certificates(store, lambda: issue(names, client_name=args.client_name, days=args.days), _say)
        if webhook is not None and api_client is not None:
            reader = SecretReader(api_client, namespace)
            _say(trust_webhook(reader, args.server_secret, api_client, webhook))
    except FpgaSlotError as exc:
        print(f"fpga-agent certs: {exc}", file=sys.stderr)
        return 1
    finally:
        if api_client is not None:
            api_client.close()  # type: ignore[no-untyped-call]
    return 0
